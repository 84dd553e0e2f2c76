"""The learning-rate sinks: the plateau rule, a schedule, and the rate they steer."""
