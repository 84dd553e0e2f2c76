"""The Keras publisher: EventBusCallback, Keras's logs as the bus's keys, and resuming a fit."""
