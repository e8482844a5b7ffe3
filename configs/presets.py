"""The pre-training presets of configs/pretrain.py (`--config=configs/pretrain.py:size=base,preset=NAME`), as
data: each is the dotted config fields it sets, laid over the defaults by `common.override`.

A preset composes with the size table and runlocal: defaults, then the preset, then an explicit `size=`
(lamb_pod's large is only its default size), then runlocal's shrinking. A new preset is one entry here (and
a line in configs/pretrain.py's docstring); configs/pretrain.py takes its names from this dict.
"""

PRESETS = {
    # Devlin et al. 2019: 256 seqs x 512 tokens (128k tokens) per step, 1M steps, Adam lr 1e-4, 10k warmup,
    # linear decay; 90% of the steps at length 128 then 10% at 512 to learn the position embeddings.
    "bert_paper": {
        "batch_size": 256,
        "num_train_steps": 1_000_000,
        "warmup_steps": 10_000,
        "optimizer.name": "adamw",
        "optimizer.learning_rate": 1e-4,
        "data.phases": ((0.9, 128, 20), (0.1, 512, 80)),
    },
    # You et al. 2019 (LAMB), NVIDIA's BERT-large recipe: phase 1 64k x 128 for 7,038 steps (lr 6e-3,
    # warmup 28.4%), phase 2 32k x 512 for 1,563 steps. One config runs one phase: phase 2 is a second run
    # with --config.init_checkpoint=<phase-1 workdir> --config.batch_size=32768 --config.num_train_steps=1563
    # --config.optimizer.learning_rate=4e-3 --config.warmup_steps=200 --config.data.max_seq_length=512
    # --config.data.max_predictions_per_seq=80.
    "lamb_pod": {
        "model.size": "large",                     # unless the config string names a size (`tiny` too)
        "batch_size": 65_536,
        "num_train_steps": 7_038,
        "warmup_steps": 2_000,
        "optimizer.name": "lamb",
        "optimizer.learning_rate": 6e-3,
        "optimizer.schedule": "polynomial",
        "optimizer.power": 0.5,
        "optimizer.weight_decay": 0.01,
        "model.scan_layers": True,
        "model.remat_policy": "dots_no_batch",
        "mesh.shape": (-1, 1, 1),
        "checkpoint_every_steps": 200,
    },
    # Fixed small compute (one CPU for minutes, a GPU for hours): get out of the unigram plateau fast.
    # Every line is an ablation row of experiments/budget_recipe.md (tiny, 600 steps x 32 x 64, news +
    # review text; the deltas are held-out MLM accuracy, preset 0.120 vs defaults 0.049). Set
    # num_train_steps to what the budget affords: the warmup and the linear decay to 0 follow it, so the
    # learning rate reaches 0 when the budget ends.
    "budget": {
        "targets": ("mlm",),                       # no NSP (RoBERTa): on pairs NSP was neutral (0.114 vs 0.113,
                                                   # rows "pairs_nsp"/"pairs"), and packed rows have no pairs
        "data.pack_sequences": True,               # full rows, no padding: +0.007 vs pairs (row "pairs")
        "model.layer_norm_type": "pre",            # pre-LN (Cramming), for stability at lr 1e-3 on deeper
                                                   # models; neutral for tiny at 600 steps (row "post_ln")
        "model.hidden_dropout_prob": 0.0,          # no dropout (Cramming): +0.011 vs 0.1 (row "dropout")
        "model.attention_probs_dropout_prob": 0.0,
        "optimizer.learning_rate": 1e-3,           # large peak (Izsak et al.): +0.071 vs 1e-4 (row "lr_1e-4")
        "num_train_steps": 10_000,                 # a placeholder: set it to what your budget affords
        "warmup_steps": lambda config: config.get_ref("num_train_steps") // 20,   # 5%, follows num_train_steps
        "data.masked_lm_prob": 0.25,               # Wettig et al. 2022: +0.012 vs 15% (row "mask15"); 40% measured
                                                   # +0.009 more after the demo's runs (row "mask40"): next candidate
        "data.max_predictions_per_seq": 32,        # 25% of the 126 maskable tokens of a 128 row
        "data.phases": (),                         # one length: 128 (no 512 phase at small budgets)
    },
    # Lan et al. 2020, section 4.1 and google-research/albert: ALBERT-base is size=base with E = 128 and one
    # shared layer (12M parameters against BERT-base's 108M), SOP instead of NSP, LAMB at lr 0.00176 with
    # batch 4096 for 125k steps (3,125 warmup), length 512 (10% shorter), 20 predictions per sequence. v2
    # models train without dropout and use the tanh GELU.
    "albert": {
        "targets": ("mlm", "sop"),
        "model.embedding_size": 128,
        "model.share_layers": True,
        "model.hidden_act": "gelu_new",            # ALBERT's activation (tanh approximation of GELU)
        "model.hidden_dropout_prob": 0.0,          # ALBERT v2: no dropout
        "model.attention_probs_dropout_prob": 0.0,
        "batch_size": 4096,
        "num_train_steps": 125_000,
        "warmup_steps": 3_125,
        "optimizer.name": "lamb",
        "optimizer.learning_rate": 0.00176,
        "data.phases": (),
        "data.max_seq_length": 512,
        "data.max_predictions_per_seq": 20,
        # ALBERT masks n-grams of n <= 3 words with p(n) ~ 1/n (0.55, 0.27, 0.18); spans of whole words with the
        # geometric law at p = 0.5 truncated at 3 (0.57, 0.29, 0.14) are the nearest law this package has.
        "data.masking_strategy": "span",
        "data.span_geo_p": 0.5,
        "data.span_max_length": 3,
    },
    # Warner et al. 2024 (ModernBERT; answerdotai/ModernBERT yamls/modernbert/modernbert-base-pretrain.yaml) on the
    # modernbert encoder family: MLM only at 30% on packed (unpadded) rows, StableAdamW (lr 8e-4, betas 0.9/0.98,
    # eps 1e-6, decoupled weight decay 1e-5 off norms and biases), warmup-stable-decay with a 1-sqrt decay, the
    # batch growing from 768 to 4,608 sequences, 1,024 tokens with every layer's rotary θ 10,000, then the
    # context extension to 8,192 tokens with the global layers' θ 160,000 (model.global_rope_theta, the model
    # the run ends with). Step counts follow num_train_steps, a placeholder as in `budget`.
    "modernbert": {
        "model.encoder": "modernbert",
        "model.max_position_embeddings": 8192,     # rotary: no table; the longest phase's length
        "model.hidden_dropout_prob": 0.0,          # ModernBERT trains without dropout
        "model.attention_probs_dropout_prob": 0.0,
        "targets": ("mlm",),
        "data.pack_sequences": True,               # unpadded: full rows across documents
        "data.masked_lm_prob": 0.3,                # 30% masking (the paper's choice, after Wettig et al. 2022)
        "data.max_seq_length": 1024,
        "data.max_predictions_per_seq": 307,       # 30% of the 1,022 maskable tokens of a 1,024 row
        # 90% of the steps at 1,024 tokens with every layer's θ 10,000, then 10% at 8,192 with the global θ at
        # model.global_rope_theta (160,000); the phase keeps batch_size rows, 8x the tokens a step.
        "data.phases": ((0.9, 1024, 307, {"global_rope_theta": 10000.0}), (0.1, 8192, 2458)),
        "batch_size": 4608,
        "num_train_steps": 400_000,                # a placeholder (~1.9T tokens at 1,024): set your budget
        "warmup_steps": lambda config: config.get_ref("num_train_steps") // 600,   # 3B of ~2T tokens
        "batch_warmup_steps": lambda config: config.get_ref("num_train_steps") // 40,   # 50B of ~2T tokens
        "batch_warmup_start": 768 / 4608,          # 768 -> 4,608 sequences
        "optimizer.name": "stable_adamw",
        "optimizer.learning_rate": 8e-4,
        "optimizer.b1": 0.9,
        "optimizer.b2": 0.98,
        "optimizer.eps": 1e-6,
        "optimizer.weight_decay": 1e-5,            # decoupled: 1e-5 x lr_t / peak per step, not x lr
        "optimizer.clip_norm": 0.0,                # StableAdamW's per-tensor update clipping replaces it
        "optimizer.schedule": "wsd",
        "optimizer.decay_shape": "1-sqrt",
        "optimizer.decay_fraction": 0.025,         # the decay over the last ~50B of ~2T tokens
    },
}
