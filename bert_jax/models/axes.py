"""Logical axis names used on every parameter and the main activations.

Parameters and activations carry *logical* names; a table of rules (in the training config) maps them onto
the physical mesh axes ('data', 'fsdp', 'tensor'). Keeping the names in one module means the model, the
sharding rules and the tests agree on spelling.
"""

# Parameter axes.
VOCAB = "vocab"        # word-embedding rows / MLM output classes
EMBED = "embed"        # hidden size H on the input side of a kernel
HEADS = "heads"        # attention heads
KV = "kv"              # per-head size H / heads
MLP = "mlp"            # feed-forward inner size (4H), also the output side of H x H kernels
LAYERS = "layers"      # the stacked-layer axis when scanning over layers
NONE = None            # replicated axis (positions, token types, tiny heads)

# Activation axes (kept distinct from parameter axes so rules can shard them differently).
ACT_BATCH = "activation_batch"
ACT_LENGTH = "activation_length"
ACT_EMBED = "activation_embed"
ACT_HEADS = "activation_heads"
ACT_KV = "activation_kv"
ACT_MLP = "activation_mlp"
ACT_VOCAB = "activation_vocab"

# Default logical -> mesh rules for a ('data', 'fsdp', 'tensor') mesh: batch split over data x fsdp,
# parameters fully sharded over fsdp on their `embed` side (ZeRO-3 style) and Megatron-style over
# `tensor` on heads / mlp / vocab. A mesh axis of size 1 makes the rule a no-op, so the same rules
# serve one CPU, one GPU and a pod slice.
DEFAULT_RULES = (
    (ACT_BATCH, ("data", "fsdp")),
    (ACT_LENGTH, None),
    (ACT_EMBED, None),
    (ACT_HEADS, "tensor"),
    (ACT_KV, None),
    (ACT_MLP, "tensor"),
    (ACT_VOCAB, "tensor"),
    (VOCAB, "tensor"),
    (EMBED, "fsdp"),
    (HEADS, "tensor"),
    (KV, None),
    (MLP, "tensor"),
    (LAYERS, None),
)
