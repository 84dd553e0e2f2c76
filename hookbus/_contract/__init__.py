"""What crosses the seams: the events, schedules, sink interface and context, and every protocol a sink
or publisher author sees.
"""
