"""Pre-training objectives as plug-ins: one class per objective, one module each, one registry.

    from bert_jax.models import objectives
    objectives.OBJECTIVES              # {"mlm": MaskedLM, "nsp": NextSentence, "sop": ..., "lm": ..., "electra": ...}
    objectives.resolve(("mlm", "nsp")) # checked instances with default settings

A new objective is a module with a subclass of `Objective` (base.py's docstring lists what it carries) and one
`@register("name")` line; it is then a value of config.targets, and the loop, the step, the FLOPs, the plots
and the plan take everything about it from the class.
"""

from bert_jax.models.objectives.base import (OBJECTIVES, Objective, all_curves, encoder_flops, normalize_metrics,
                                             objective_names, register, resolve, sequence_flops, state_fields,
                                             sum_loss, validate_targets)
# The built-in objectives register themselves on import, in this order (the order of the plots' panels).
from bert_jax.models.objectives import mlm, nsp, sop, lm, electra  # noqa: E402,F401  (registration)

__all__ = ["OBJECTIVES", "Objective", "register", "resolve", "validate_targets", "objective_names",
           "encoder_flops", "sequence_flops", "normalize_metrics", "all_curves", "state_fields", "sum_loss"]
