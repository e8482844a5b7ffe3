"""The files that say what a run is, beside its checkpoints: plan.json (what the config resolved to)."""

PLAN_NAME = "plan.json"
