"""The MonitoredSession world: EventBusHook, what it fetches, its steps, the start gate, the session
and the evaluator.
"""
