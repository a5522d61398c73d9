"""Tables and figures for people: what a run achieved, at a glance."""
