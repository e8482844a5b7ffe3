r"""Pre-training config: BERT of a given size on raw text or TFRecords.

Run (a few seconds on a CPU):
  python train.py --config=configs/pretrain.py:size=tiny,runlocal --workdir=/tmp/bert_tiny \
      --config.data.input_files=corpus.txt --config.data.vocab_file=vocab.txt

Variants after the colon, comma-separated (read by configs/common.py; presets are data in configs/presets.py):
  size=tiny|mini|small|medium|base|large    model size (heads = H/64, FFN = 4H); the bare name (`tiny`) too
  runlocal (alias debug)                    shrink steps/batch/length so it runs in seconds on a CPU
  preset=bert_paper                         BERT paper: 256 x 512 tokens, 1M steps, lr 1e-4, 10k warmup,
                                            90% of steps at length 128, then 10% at 512
  preset=lamb_pod                           LAMB large batch (You et al. 2019; NVIDIA's recipe): 64k then
                                            32k sequences, 7,038 + 1,563 steps, for TPU pod slices
  preset=budget                             a fixed small compute budget (Cramming / Izsak et al. / RoBERTa):
                                            MLM only on packed full-length rows, pre-LN, no dropout, lr 1e-3,
                                            short warmup, decay to 0 at num_train_steps, 25% masking
                                            (each choice measured in experiments/budget_recipe.md)
  preset=albert                             ALBERT (Lan et al. 2020): factorised embeddings E = 128, one layer
                                            shared by all, SOP, LAMB lr 0.00176 x 4096 x 512, 125k steps, no
                                            dropout (v2), n-gram masking approximated by spans of <= 3 words
  preset=modernbert                         ModernBERT (Warner et al. 2024) on model.encoder=modernbert: MLM at
                                            30% on packed rows, StableAdamW lr 8e-4, warmup-stable-decay
                                            (1-sqrt), batch warmup 768 -> 4,608, 1,024 tokens then 8,192 with
                                            the global rotary θ raised to 160,000
  fast                                      attention dropout 0 so the fused attention kernel (cuDNN on
                                            GPUs, Pallas flash on TPUs) can run: a deviation from BERT,
                                            measured in experiments/fast_attention.md
Override any field with --config.FIELD=VALUE, e.g. --config.optimizer.learning_rate=5e-4.
"""

import ml_collections

from bert_jax.models import axes

try:                      # a checkout: configs/ beside bert_jax/, the repository root on sys.path
  from configs import common, presets
except ImportError:       # installed: the wheel ships configs/ as the package bert_jax_configs
  from bert_jax_configs import common, presets


def get_config(arg=None):
  arg = common.parse_arg(arg, "configs/pretrain.py", bare=common.size_words(), size=(None, common.SIZES),
                         preset=(None, tuple(presets.PRESETS)), fast=False, runlocal=False)
  config = ml_collections.ConfigDict()
  config.seed = 0                                  # parameter init, dropout and data order

  # Model: sizes from bert_jax.models.config.SIZES; any BertConfig field may be overridden here.
  config.model = ml_collections.ConfigDict()
  config.model.size = arg.size or "base"           # tiny/mini/small/medium/base/large
  config.model.hidden_size = -1                    # -1 = from size (random init only; as configs/finetune.py)
  config.model.num_hidden_layers = -1              # -1 = from size
  config.model.num_attention_heads = -1            # -1 = from size (H / 64)
  config.model.intermediate_size = -1              # -1 = from size (4 H)
  config.model.vocab_size = -1                     # -1: take the number of lines of data.vocab_file
  config.model.encoder = "transformer"             # a registered family (models/encoders/): transformer | lstm |
                                                   # modernbert
  config.model.layer_norm_type = "post"            # post (BERT) | pre
  config.model.hidden_dropout_prob = 0.1
  config.model.attention_probs_dropout_prob = 0.1
  config.model.max_position_embeddings = 512
  config.model.dtype = "auto"                      # compute dtype: auto = bfloat16 on GPU/TPU, float32 on CPU;
                                                   # params stay float32
  config.model.param_dtype = "float32"
  config.model.attention_impl = "auto"             # auto | einsum | xla | cudnn | cudnn_dropout | pallas_flash
                                                   # (bert_jax/models/attention.py; auto picks by platform)
  config.model.scan_layers = False                 # nn.scan over layers (fast compiles for deep models)
  config.model.remat_policy = "none"               # none | full | dots | dots_no_batch | minimal
  config.model.embedding_size = 0                  # E of factorised embeddings (ALBERT: 128; tables [V, E] and a
                                                   # dense E -> H); 0 = BERT (tables [V, H], no projection)
  config.model.share_layers = False                # ALBERT: one layer's parameters for every layer (with
                                                   # scan_layers: one compiled layer)
  # ModernBERT (encoder="modernbert"; Hugging Face ModernBertConfig's names, unread by the other families)
  config.model.local_attention = 128               # sliding window in tokens in all (+-64), even, <= max positions
  config.model.global_attn_every_n_layers = 3      # layer i is global when i % n == 0, the others sliding
  config.model.global_rope_theta = 160000.0        # rotary theta of the global layers (10,000 for a 1,024 phase)
  config.model.local_rope_theta = 10000.0          # rotary theta of the sliding-window layers
  config.model.local_attention_impl = "auto"       # sliding layers: auto | blocked (linear in T) | dense (T x T) | jax
  config.targets = ("mlm", "nsp")                  # registered objectives (models/objectives/): mlm, nsp,
                                                   # sop, lm (lm alone), electra (alone)
  # ELECTRA (targets=("electra",), models/electra.py): a generator MLM fills the masked positions with
  # sampled tokens and the model (the discriminator) tells replaced from original on every real token.
  config.electra = ml_collections.ConfigDict()
  config.electra.generator_hidden_fraction = 0.25  # generator width / discriminator width (paper: 1/4 - 1/2)
  config.electra.generator_num_layers = -1         # generator depth; -1 = the discriminator's (the paper's)
  config.electra.generator_num_attention_heads = -1  # -1: generator width / 64 (google-research/electra's head
                                                   # size); an imported generator with other heads names its count
  config.electra.disc_weight = 50.0                # lambda: loss = generator MLM + lambda x discriminator BCE
  config.electra.temperature = 1.0                 # generator softmax temperature when sampling replacements
  config.electra.initial_temperature = 1.0         # with temperature_anneal_steps > 0: the temperature at step 0,
  config.electra.temperature_anneal_steps = 0      # falling log-linearly to `temperature` by this step (0: none)
  config.electra.disc_bias_init = 0.0              # the discriminator's output bias at init (HF/paper: 0)
  config.electra.disc_mlm_weight = 0.0             # > 0: the discriminator also predicts the original token at
                                                   # the masked positions (BERT's MLM head), this x its loss

  # Data.
  config.data = ml_collections.ConfigDict()
  config.data.input_files = ""                     # comma-separated globs: raw text (.txt) or TFRecords
  config.data.eval_input_files = ""                # held-out data for periodic evaluation ("" = none)
  config.data.vocab_file = ""                      # WordPiece vocab; copied into the work directory
  config.data.do_lower_case = True                 # uncased models lower-case and strip accents
  config.data.max_seq_length = 128                 # tokens per sequence incl. [CLS]/[SEP]
  config.data.max_predictions_per_seq = 20         # MLM predictions per sequence (15% of 128 ~ 19)
  config.data.masking = "auto"                     # auto | static | dynamic. auto: static (the records' stored
                                                   # masks, exactly, as Google) for TFRecords with masks,
                                                   # dynamic (fresh masks each epoch) for raw text; logged
  config.data.google_exact = False                 # Google's create_pretraining_data rules (docs/data.md
                                                   # deviations): pairs, long sentences, control chars, mask count
  config.data.masked_lm_prob = 0.15                # share of tokens selected for prediction (dynamic masking)
  config.data.short_seq_prob = 0.1                 # share of shorter sequences (raw text)
  config.data.masking_strategy = "token"           # token | whole_word | span (dynamic masking): single tokens,
                                                   # whole words (## pieces, jieba or the records' word
                                                   # boundaries) or SpanBERT spans of whole words; 80/10/10
                                                   # per token, per span for span (input_pipeline/masking.py)
  config.data.span_geo_p = 0.2                     # span: length l words with P ~ p (1-p)^(l-1) (SpanBERT: 0.2)
  config.data.span_max_length = 10                 # span: lengths truncated at this many words (mean 3.8)
  config.data.do_whole_word_mask = False           # Google's flag name, an alias of masking_strategy=whole_word
                                                   # (records with word_continuation are re-masked by words)
  config.data.chinese_whole_word_mask = False      # word boundaries from jieba for Chinese (raw text); turns
                                                   # masking_strategy=token into whole_word
  config.data.pair_mode = "nsp"                    # nsp | sop: how sentence pairs are labelled
  config.data.pack_sequences = False               # raw text: full-length rows across documents, no pairs,
                                                   # no padding (RoBERTa FULL-SENTENCES; needs targets=("mlm",))
  config.data.packing = "pairs"                    # pairs (BERT's) | stream (= pack_sequences) | documents: raw
                                                   # text, whole documents packed best-fit into rows, each its
                                                   # own attention block and positions (MLM-only targets)
  config.data.max_examples_per_row = 8             # documents: at most this many documents (pieces) per row
  config.data.shuffle_buffer = 10_000              # examples in the shuffle buffer; 0 = no shuffling at all
                                                   # (file order, e.g. to inspect batches)
  config.data.allow_invalid_utf8 = False           # raw text with > 1% of lines not UTF-8 (a GBK file): refused
                                                   # (the error names the iconv fix); true reads on, skipping them
  # Two-phase schedule as in the BERT paper: ((fraction of steps, max_seq_length, max_predictions), ...).
  # Empty = one phase with data.max_seq_length.
  config.data.phases = ()

  # Optimisation. batch_size is global (all hosts); per-host batch = batch_size / process_count.
  config.batch_size = 256
  config.grad_accum_steps = 1                      # micro-batches per step (batch_size must divide)
  config.batch_warmup_steps = 0                    # batch-size warmup: the gradient of a batch growing from
                                                   # batch_warmup_start x batch_size to batch_size over these
                                                   # steps (0 = off; MLM only: pretrain/batch_warmup.py)
  config.batch_warmup_start = 0.25                 # share of batch_size that counts at step 0
  config.num_train_steps = 1_000_000
  config.warmup_steps = 10_000
  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.name = "adamw"                  # adamw | lamb | stable_adamw (AdamW + per-tensor update
                                                   # clipping, decoupled decay: engine/optimizers.py)
  config.optimizer.learning_rate = 1e-4            # peak learning rate after warmup
  config.optimizer.schedule = "linear"             # linear | polynomial: decay after warmup; google: Google's
                                                   # optimization.py (decay over all steps from 0, warmup
                                                   # overriding it, no bias correction); wsd: warmup, stable
                                                   # peak, decay over the last decay_fraction of the steps
  config.optimizer.decay_fraction = 0.1            # wsd: share of the steps that decay (at the end)
  config.optimizer.decay_shape = "linear"          # wsd: linear | 1-sqrt
  config.optimizer.power = 1.0                     # polynomial decay power (LAMB recipe: 0.5)
  config.optimizer.weight_decay = 0.01             # decoupled, not on LayerNorm or biases
  config.optimizer.b1 = 0.9
  config.optimizer.b2 = 0.999
  config.optimizer.eps = 1e-6
  config.optimizer.clip_norm = 1.0                 # global-norm clipping (0 = off)
  config.optimizer.bias_correction = True          # Adam bias correction; False = Google BERT's exact AdamW
                                                   # (3x larger early steps: stalls small models at lr 1e-3)
  config.optimizer.end_learning_rate = 0.0         # learning rate reached at num_train_steps
  config.nan_policy = "stop"                       # stop | skip: on a NaN/Inf loss or gradient
  config.max_consecutive_nonfinite = 10            # skip: error after this many skipped steps in a row

  # Checkpoints, logging, evaluation.
  config.checkpoint_every_steps = 1_000
  config.keep_checkpoints = 3                      # newest checkpoints kept by Orbax
  config.log_every_steps = 100
  config.eval_every_steps = 10_000
  config.eval_steps = 100                          # batches per evaluation
  config.init_checkpoint = ""                      # pre-training work dir, converted checkpoint or zoo name
  config.peak_flops_per_device = 0.0               # FLOP/s for the MFU estimate (0 = table by device kind)
  config.compilation_cache_dir = "auto"           # persistent XLA cache: a relaunch loads the compiled
                                                   # step (auto: ~/.cache/bert_jax/xla or
                                                   # $BERT_JAX_COMPILATION_CACHE_DIR; "": off)
  config.progress_bar = True                       # tqdm progress bar on process 0

  # Sharding: one mesh, named axes; -1 takes the remaining devices. Logical -> mesh axis rules.
  config.mesh = ml_collections.ConfigDict()
  config.mesh.shape = (-1, 1, 1)
  config.mesh.axes = ("data", "fsdp", "tensor")
  config.logical_axis_rules = axes.DEFAULT_RULES

  # Multi-host: auto-detected on TPU pods; on GPU clusters pass coordinator/process info.
  config.distributed = ml_collections.ConfigDict()
  config.distributed.enable = False                # call jax.distributed.initialize at start-up
  config.distributed.coordinator_address = ""      # "host:port" of process 0 ("" = auto, e.g. TPU/SLURM)
  config.distributed.num_processes = -1            # -1 = auto
  config.distributed.process_id = -1               # -1 = auto
  config.distributed.cpu_collectives = "gloo"      # CPU cross-process collectives (local multi-process runs)
  # A host silent this long is dead: the others print one line and exit 75 (retryable). JAX's own default is
  # 100 s (its abort: SIGABRT); 60 s = 10 missed beats (one every 6 s), detection within about a minute,
  # above a GC or file-system pause. JAX's heartbeat is set 30 s later, as the backstop. 2 .. 1e6 s.
  config.distributed.heartbeat_timeout_s = 60.0
  # Every host must join jax.distributed within this (else one line and exit 75 on the hosts that did). JAX's
  # own default, 300 s: a pod's VMs and containers start minutes apart; JAX's limit is set 30 s later. 2 .. 1e6 s.
  config.distributed.initialization_timeout_s = 300.0

  # Step watchdog (bert_jax/engine/watchdog.py): a host with no finished step for max(min_s, step_factor x
  # median step time) (+ an allowance while compiling, evaluating or checkpointing) dumps its threads' stacks,
  # names the stalled host and phase and exits 75, so that no host waits forever on a stuck one.
  config.watchdog = ml_collections.ConfigDict()
  config.watchdog.enable = "auto"                  # auto: on for multi-host runs | True | False
  config.watchdog.step_factor = 10.0               # 10x the median: input hiccups and GC pauses pass
  config.watchdog.min_s = 300.0                    # floor (>= 1): a slow shared file system's minute-long stall passes
  config.watchdog.compile_s = 1800.0               # + while the first step of a phase compiles (large/pod: ~10 min)
  config.watchdog.eval_s = 1800.0                  # + per evaluation (eval_steps batches, its own compile)
  config.watchdog.checkpoint_s = 1800.0            # + per checkpoint save (large + Adam on gs://: minutes)

  if arg.preset:           # configs/presets.py; an explicit size wins over the preset's (lamb_pod: large)
    common.override(config, presets.PRESETS[arg.preset], f"configs/presets.py:{arg.preset}")
    config.model.size = arg.size or config.model.size

  if arg.fast:
    # Deviation from BERT (docs/speed.md): no attention-probability dropout, so attention_impl=auto may use a fused
    # kernel that cannot drop probabilities; hidden dropout stays. Effect: experiments/fast_attention.md.
    config.model.attention_probs_dropout_prob = 0.0

  if arg.runlocal:
    config.model.dtype = "float32"                 # CPUs have no fast bf16 matmuls
    config.batch_size = 16
    config.num_train_steps = 20
    config.warmup_steps = 2
    config.optimizer.learning_rate = 1e-3
    config.data.max_seq_length = 64
    config.data.max_predictions_per_seq = 10
    config.data.phases = ()
    config.data.shuffle_buffer = 1_000
    config.checkpoint_every_steps = 10
    config.log_every_steps = 5
    config.eval_every_steps = 10
    config.eval_steps = 2
  return config
