"""The discrete-event engine every qosched simulator runs on."""

from qosched.sim.engine import EmptySchedule, Engine, Event

__all__ = ["EmptySchedule", "Engine", "Event"]
