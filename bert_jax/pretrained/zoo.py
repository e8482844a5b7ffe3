"""A registry of well-known public BERT checkpoints, and `resolve` from a zoo name to a local converted dir.

Nothing here downloads. `python -m bert_jax.convert zoo` prints the registry; each entry says where the
weights come from and the two commands that fetch and convert them. A converted model is looked up in
$BERT_JAX_ZOO_DIR/NAME, then ~/.cache/bert_jax/zoo/NAME ("/" in a name becomes "--"), so that
`--init_checkpoint=hfl/chinese-roberta-wwm-ext` works once the files are present.

Parameter counts are computed from the architecture (BertForPreTraining incl. pooler, MLM and NSP heads,
the decoder tied to the word embeddings): BERT-base uncased = 110,106,428, as Hugging Face counts it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Dict, List, Optional, Sequence

from bert_jax.pretrained import params_dir

GOOGLE = "https://storage.googleapis.com/bert_models"
HF = "https://huggingface.co"


@dataclasses.dataclass(frozen=True)
class ZooEntry:
  name: str
  layers: int
  hidden: int
  heads: int
  vocab_size: int
  language: str
  corpus: str
  cased: bool
  fmt: str                      # "google_tf" (zip of bert_model.ckpt + bert_config.json + vocab.txt) | "hf"
  url: str
  hf_repo: Optional[str] = None  # a Hugging Face copy of the same weights, where one exists
  max_positions: int = 512
  note: str = ""
  kind: str = "bert"            # bert | electra-discriminator | electra-generator | albert | modernbert
  embedding_size: int = 0       # ELECTRA's / ALBERT's embedding width E (0: = hidden)
  intermediate_size: int = 0    # FFN width (0: 4 x hidden)

  @property
  def intermediate(self) -> int:
    return self.intermediate_size or 4 * self.hidden

  @property
  def params(self) -> int:
    """Parameter count as Hugging Face counts the model (tied decoder counted once): BertForPreTraining
    (pooler, MLM, NSP), ElectraForPreTraining (embeddings of width E, E -> H projection when E != H, the
    discriminator head) or ElectraForMaskedLM (the generator head H -> E, LayerNorm, output bias)."""
    V, H, I, P, L = self.vocab_size, self.hidden, self.intermediate, self.max_positions, self.layers
    E = self.embedding_size or H
    embeddings = (V + P + 2) * E + 2 * E + (E * H + H if E != H else 0)
    layer = 4 * (H * H + H) + 2 * H * I + I + H + 4 * H
    if self.kind == "electra-discriminator":
      heads = (H * H + H) + (H + 1)                                     # dense + dense_prediction
    elif self.kind == "electra-generator":
      heads = (H * E + E) + 2 * E + V                                   # dense H -> E, LayerNorm, lm-head bias
    elif self.kind == "modernbert":   # ModernBertForMaskedLM: no position/type tables, bias-free, GeGLU
      embeddings = V * H + H                                          # token embeddings + norm
      layer = 4 * H * H + 3 * H * I + 2 * H                           # Wqkv, Wo, Wi (2I), Wo, two norms
      # head dense + norm, decoder bias; the final norm (H) and layer 0's absent attn_norm (-H) cancel
      heads = (H * H + H) + V
    elif self.kind == "albert":   # AlbertForPreTraining: always the E -> H projection, one shared layer
      embeddings += 0 if E != H else E * H + H
      L = 1
      heads = (H * H + H) + (H * E + E) + 2 * E + V + (2 * H + 2)    # pooler, MLM H -> E + LN + bias, SOP
    else:
      heads = (H * H + H) + (H * H + H) + 2 * H + V + (2 * H + 2)   # pooler, MLM transform + LN + bias, NSP
    return embeddings + L * layer + heads

  @property
  def size(self) -> str:
    e = self.embedding_size
    return f"L-{self.layers}/H-{self.hidden}/A-{self.heads}" + (f"/E-{e}" if e and e != self.hidden else "")

  def how_to_convert(self, dest: Optional[str] = None) -> str:
    dest = dest or default_dir(self.name)
    if self.fmt == "google_tf":
      zip_name = self.url.rsplit("/", 1)[-1]
      folder = zip_name[:-len(".zip")]
      return (f"wget {self.url} && unzip {zip_name}\n"
              f"python -m bert_jax.convert import-tf --checkpoint={folder}/bert_model.ckpt --output={dest}")
    repo = self.url[len(HF) + 1:]
    return (f"hf download {repo} --local-dir {repo.replace('/', '--')}   "
            f"(or: git lfs install && git clone {self.url} {repo.replace('/', '--')})\n"
            f"python -m bert_jax.convert import-hf --input={repo.replace('/', '--')} --output={dest}")


def _google(name, zip_path, L, H, V, corpus, cased, language="English", note="", hf_repo=None):
  return ZooEntry(name, L, H, H // 64, V, language, corpus, cased, "google_tf", f"{GOOGLE}/{zip_path}",
                  hf_repo=hf_repo, note=note)


def _hf(repo, L, H, V, language, corpus, cased, note=""):
  return ZooEntry(repo, L, H, H // 64, V, language, corpus, cased, "hf", f"{HF}/{repo}", note=note)


def _electra(repo, L, H, E, V, language, corpus, note=""):
  """An ELECTRA folder on the Hub: "-discriminator" (ElectraForPreTraining; imports as the discriminator that
  fine-tuning uses) or "-generator" (ElectraForMaskedLM; imports as a BERT MLM). Heads H/64, FFN 4H."""
  kind = "electra-generator" if repo.endswith("-generator") else "electra-discriminator"
  if E != H:
    note = (note + "; " if note else "") + f"factorised embeddings E={E} (model.embedding_size)"
  return ZooEntry(repo, L, H, H // 64, V, language, corpus, False, "hf", f"{HF}/{repo}", note=note, kind=kind,
                  embedding_size=E)


def _modernbert(repo, L, H, A, I, V, language, corpus, note=""):
  """A ModernBERT folder on the Hub (ModernBertForMaskedLM; import-hf reads model_type "modernbert"): encoder
  modernbert, 8,192 positions, a byte-level BPE tokenizer.json (copied by import-hf; no vocab.txt)."""
  return ZooEntry(repo, L, H, A, V, language, corpus, True, "hf", f"{HF}/{repo}", max_positions=8192, note=note,
                  kind="modernbert", intermediate_size=I)


def _albert(name, repo, L, H, A, V, language, corpus, cased=False, note="", E=128):
  """An ALBERT folder on the Hub (AlbertForPreTraining or AlbertModel; import-hf reads model_type "albert"):
  factorised embeddings E, one layer shared by all, an SOP head. FFN 4H."""
  return ZooEntry(name, L, H, A, V, language, corpus, cased, "hf", f"{HF}/{repo}", note=note, kind="albert",
                  embedding_size=E)


_WIKI_BOOKS = "BooksCorpus + English Wikipedia (3.3B words)"
_CLUE_SMALL = "CLUECorpusSmall (14 GB: news, web, Wikipedia, comments)"


def _build() -> Dict[str, ZooEntry]:
  e: List[ZooEntry] = [
      # Google's original releases (google-research/bert README).
      _google("bert-base-uncased", "2018_10_18/uncased_L-12_H-768_A-12.zip", 12, 768, 30522, _WIKI_BOOKS, False,
              hf_repo="google-bert/bert-base-uncased"),
      _google("bert-large-uncased", "2018_10_18/uncased_L-24_H-1024_A-16.zip", 24, 1024, 30522, _WIKI_BOOKS,
              False, hf_repo="google-bert/bert-large-uncased"),
      _google("bert-base-cased", "2018_10_18/cased_L-12_H-768_A-12.zip", 12, 768, 28996, _WIKI_BOOKS, True,
              hf_repo="google-bert/bert-base-cased"),
      _google("bert-large-cased", "2018_10_18/cased_L-24_H-1024_A-16.zip", 24, 1024, 28996, _WIKI_BOOKS, True,
              hf_repo="google-bert/bert-large-cased"),
      _google("bert-large-uncased-wwm", "2019_05_30/wwm_uncased_L-24_H-1024_A-16.zip", 24, 1024, 30522,
              _WIKI_BOOKS, False, note="whole-word masking",
              hf_repo="google-bert/bert-large-uncased-whole-word-masking"),
      _google("bert-large-cased-wwm", "2019_05_30/wwm_cased_L-24_H-1024_A-16.zip", 24, 1024, 28996,
              _WIKI_BOOKS, True, note="whole-word masking",
              hf_repo="google-bert/bert-large-cased-whole-word-masking"),
      _google("bert-base-multilingual-cased", "2018_11_23/multi_cased_L-12_H-768_A-12.zip", 12, 768, 119547,
              "Wikipedia of 104 languages", True, language="multilingual (104)",
              hf_repo="google-bert/bert-base-multilingual-cased"),
      _google("bert-base-multilingual-uncased", "2018_11_03/multilingual_L-12_H-768_A-12.zip", 12, 768, 105879,
              "Wikipedia of 102 languages", False, language="multilingual (102)",
              note="original release; Google recommends the cased one",
              hf_repo="google-bert/bert-base-multilingual-uncased"),
      _google("bert-base-chinese", "2018_11_03/chinese_L-12_H-768_A-12.zip", 12, 768, 21128,
              "Chinese Wikipedia (simplified + traditional)", False, language="Chinese",
              note="character-level", hf_repo="google-bert/bert-base-chinese"),
  ]
  # Google's 24 smaller BERTs (Turc et al. 2019, "Well-Read Students Learn Better"), uncased English.
  small_names = {(2, 128): "BERT-Tiny", (4, 256): "BERT-Mini", (4, 512): "BERT-Small", (8, 512): "BERT-Medium",
                 (12, 768): "BERT-Base"}
  for L in (2, 4, 6, 8, 10, 12):
    for H in (128, 256, 512, 768):
      stem = f"uncased_L-{L}_H-{H}_A-{H // 64}"
      e.append(_google(f"bert_{stem}", f"2020_02_20/{stem}.zip", L, H, 30522, _WIKI_BOOKS, False,
                       note=small_names.get((L, H), "") or "small BERT", hf_repo=f"google/bert_{stem}"))
  # HFL (Harbin Institute of Technology / iFLYTEK) Chinese BERT-wwm family, BERT architecture.
  ext = "Chinese Wikipedia + EXT (news, baike, QA; 5.4B words)"
  e += [
      _hf("hfl/chinese-bert-wwm", 12, 768, 21128, "Chinese", "Chinese Wikipedia (0.4B words)", False,
          note="whole-word masking (LTP segmentation)"),
      _hf("hfl/chinese-bert-wwm-ext", 12, 768, 21128, "Chinese", ext, False, note="whole-word masking"),
      _hf("hfl/chinese-roberta-wwm-ext", 12, 768, 21128, "Chinese", ext, False,
          note="RoBERTa-style training, BERT architecture (load as BERT)"),
      _hf("hfl/chinese-roberta-wwm-ext-large", 24, 1024, 21128, "Chinese", ext, False,
          note="RoBERTa-style training, BERT architecture"),
      _hf("hfl/rbt3", 3, 768, 21128, "Chinese", ext, False, note="3 layers of chinese-roberta-wwm-ext"),
      _hf("hfl/rbtl3", 3, 1024, 21128, "Chinese", ext, False, note="3 layers of chinese-roberta-wwm-ext-large"),
      _hf("hfl/chinese-macbert-base", 12, 768, 21128, "Chinese", ext, False, note="MacBERT (MLM as correction)"),
      _hf("hfl/chinese-macbert-large", 24, 1024, 21128, "Chinese", ext, False, note="MacBERT (MLM as correction)"),
  ]
  # UER-py Chinese RoBERTa miniatures (24 sizes) and whole-word-masking miniatures, all on CLUECorpusSmall.
  for L in (2, 4, 6, 8, 10, 12):
    for H in (128, 256, 512, 768):
      e.append(_hf(f"uer/chinese_roberta_L-{L}_H-{H}", L, H, 21128, "Chinese", _CLUE_SMALL, False,
                   note="UER-py; char-level, MLM only (no NSP head)"))
  for size, (L, H) in (("tiny", (2, 128)), ("mini", (4, 256)), ("small", (4, 512)), ("medium", (8, 512)),
                       ("base", (12, 768)), ("large", (24, 1024))):
    e.append(_hf(f"uer/roberta-{size}-wwm-chinese-cluecorpussmall", L, H, 21128, "Chinese", _CLUE_SMALL, False,
                 note="UER-py; whole-word masking (jieba), MLM only"))
  # English domain models in BERT format (for ranking by domain fit).
  e += [
      _hf("dmis-lab/biobert-base-cased-v1.1", 12, 768, 28996, "English", "PubMed abstracts (+ BERT's corpus)",
          True, note="biomedical; BERT-base cased vocab"),
      _hf("allenai/scibert_scivocab_uncased", 12, 768, 31090, "English",
          "Semantic Scholar papers (1.14M, 82% biomedical)", False, note="scientific; own vocab"),
      _hf("emilyalsentzer/Bio_ClinicalBERT", 12, 768, 28996, "English", "MIMIC-III clinical notes", True,
          note="clinical; initialised from BioBERT"),
      _hf("nlpaueb/legal-bert-base-uncased", 12, 768, 30522, "English",
          "legislation, court cases, contracts (12 GB)", False, note="legal; own vocab"),
      _hf("microsoft/BiomedNLP-BiomedBERT-base-uncased-abstract-fulltext", 12, 768, 30522, "English",
          "PubMed abstracts + PMC full text", False, note="biomedical from scratch (formerly PubMedBERT)"),
  ]
  # ELECTRA (Clark et al. 2020; google-research/electra README): uncased English, BERT's vocab. The released
  # generators: Small's is as wide as its discriminator (the README: "we did not use a small generator for
  # that model"), Base's is 1/3 (256), Large's 1/4 (256).
  owt = "BooksCorpus + Wikipedia (Small/Base) / + ClueWeb, CommonCrawl, Gigaword (Large, XLNet's data)"
  e += [
      _electra("google/electra-small-discriminator", 12, 256, 128, 30522, "English", owt, note="ELECTRA-Small++"),
      _electra("google/electra-small-generator", 12, 256, 128, 30522, "English", owt, note="ELECTRA-Small++"),
      _electra("google/electra-base-discriminator", 12, 768, 768, 30522, "English", owt, note="ELECTRA-Base++"),
      _electra("google/electra-base-generator", 12, 256, 768, 30522, "English", owt, note="ELECTRA-Base++"),
      _electra("google/electra-large-discriminator", 24, 1024, 1024, 30522, "English", owt, note="ELECTRA-1.75M"),
      _electra("google/electra-large-generator", 24, 256, 1024, 30522, "English", owt, note="ELECTRA-1.75M"),
  ]
  # HFL's Chinese ELECTRA on 180 GB of text (ymcui/Chinese-ELECTRA), BERT's Chinese vocab (21,128 characters).
  # Their generators' widths are not documented there, so only the discriminators are registered.
  c180 = "180 GB Chinese text (Wikipedia, EXT, CommonCrawl)"
  e += [
      _electra("hfl/chinese-electra-180g-small-discriminator", 12, 256, 128, 21128, "Chinese", c180),
      _electra("hfl/chinese-electra-180g-small-ex-discriminator", 24, 256, 256, 21128, "Chinese", c180,
               note="embedding_size 256 (ymcui/Chinese-ELECTRA config/small_ex_discriminator_config.json)"),
      _electra("hfl/chinese-electra-180g-base-discriminator", 12, 768, 768, 21128, "Chinese", c180),
      _electra("hfl/chinese-electra-180g-large-discriminator", 24, 1024, 1024, 21128, "Chinese", c180),
  ]
  # ALBERT (Lan et al. 2020; google-research/albert), v2: no dropout, trained longer. The English models use a
  # 30,000-piece SentencePiece vocab: import-hf writes its pieces to vocab.txt in id order and copies the
  # folder's tokenizer.json beside it, which then tokenizes text (tokenization.SentencePieceTokenizer).
  spm = "SentencePiece vocab (tokenizer.json, kept by import-hf: the ids of AlbertTokenizerFast)"
  e += [
      _albert("albert-base-v2", "albert/albert-base-v2", 12, 768, 12, 30000, "English", _WIKI_BOOKS, note=spm),
      _albert("albert-large-v2", "albert/albert-large-v2", 24, 1024, 16, 30000, "English", _WIKI_BOOKS, note=spm),
      _albert("albert-xlarge-v2", "albert/albert-xlarge-v2", 24, 2048, 16, 30000, "English", _WIKI_BOOKS,
              note=spm),
      _albert("albert-xxlarge-v2", "albert/albert-xxlarge-v2", 12, 4096, 64, 30000, "English", _WIKI_BOOKS,
              note=spm),
  ]
  # Chinese ALBERTs (brightmart/albert_zh, converted to transformers by voidful): BERT's Chinese WordPiece vocab
  # (vocab.txt, BertTokenizer): fully supported. Shapes as published there; import-hf reads config.json anyway.
  zh = "brightmart/albert_zh: 30 GB Chinese (encyclopedia, news, forums)"
  e += [
      _albert("voidful/albert_chinese_tiny", "voidful/albert_chinese_tiny", 4, 312, 12, 21128, "Chinese", zh,
              note="WordPiece vocab.txt (BertTokenizer); character-level"),
      _albert("voidful/albert_chinese_base", "voidful/albert_chinese_base", 12, 768, 12, 21128, "Chinese", zh,
              note="WordPiece vocab.txt (BertTokenizer); character-level"),
  ]
  # ModernBERT (Warner et al. 2024): rotary, GeGLU, global attention every third layer and a 128-token window in
  # the others, 8,192 tokens of context; a byte-level BPE tokenizer.json (50,280 tokens in a table of 50,368)
  # with BERT's special tokens. import-hf copies tokenizer.json as it is; text is tokenized with it where the
  # package reads tokenizer.json (no WordPiece vocab.txt stands for it).
  mb = "2T tokens of English web text, code and science (ModernBERT)"
  bpe = "needs tokenizer.json (byte-level BPE, [CLS]/[SEP]/[MASK]); context 8,192 (global theta 160,000)"
  e += [
      _modernbert("answerdotai/ModernBERT-base", 22, 768, 12, 1152, 50368, "English", mb, note=bpe),
      _modernbert("answerdotai/ModernBERT-large", 28, 1024, 16, 2624, 50368, "English", mb, note=bpe),
      # Ant Group's Chinese ModernBERT (arXiv 2510.12285): a 32k Chinese BPE vocab, whole-word masking. Its card
      # says RMSNorm: import-hf converts it only if its config.json is transformers' ModernBertConfig (LayerNorm);
      # otherwise the import stops at the config with the reason.
      _modernbert("feynmanzhao/chinese-modernbert-large-wwm", 28, 1024, 16, 2624, 32000, "Chinese",
                  "1.2T Chinese tokens (CCI3-HQ, CCI4, Cosmopedia-Chinese)",
                  note="needs tokenizer.json (32k Chinese BPE); context 8,192; shapes from its card, read from "
                       "config.json at import"),
  ]
  return {x.name: x for x in e}


REGISTRY: Dict[str, ZooEntry] = _build()


def local_name(name: str) -> str:
  return name.replace("/", "--")


def default_root() -> str:
  return os.environ.get("BERT_JAX_ZOO_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "bert_jax", "zoo")


def default_dir(name: str) -> str:
  return os.path.join(default_root(), local_name(name))


def _is_converted(directory: str) -> bool:
  return params_dir.is_params_dir(directory)


class ZooError(FileNotFoundError):
  """A zoo name without local files, or a name/path that is neither; the message says what to do."""


def resolve(name_or_path: str, search_dirs: Sequence[str] = ()) -> str:
  """A local checkpoint directory for an existing path or a zoo name (never downloads).

  Looks for a converted zoo model in each of `search_dirs`, $BERT_JAX_ZOO_DIR and ~/.cache/bert_jax/zoo
  (as DIR/NAME with "/" -> "--"). Raises ZooError with the download-and-convert commands otherwise.
  """
  if os.path.isdir(name_or_path):
    return name_or_path
  roots = list(search_dirs)
  if os.environ.get("BERT_JAX_ZOO_DIR"):
    roots.append(os.environ["BERT_JAX_ZOO_DIR"])
  roots.append(os.path.join(os.path.expanduser("~"), ".cache", "bert_jax", "zoo"))
  if name_or_path in REGISTRY:
    entry = REGISTRY[name_or_path]
    tried = [os.path.join(r, local_name(entry.name)) for r in roots]
    for d in tried:
      if _is_converted(d):
        return d
    raise ZooError(
        f"zoo model {entry.name!r} ({entry.size}, {entry.language}, {entry.corpus}) is not present locally; "
        f"looked in {tried}. Nothing is downloaded automatically. To fetch and convert it:\n"
        + entry.how_to_convert(tried[0] if search_dirs else default_dir(entry.name)))
  close = difflib.get_close_matches(name_or_path, list(REGISTRY), n=3)
  hint = f"; did you mean {close}?" if close else "; `python -m bert_jax.convert zoo` lists the names"
  raise ZooError(f"{name_or_path!r} is neither an existing directory nor a zoo model name{hint}")


def format_table(entries: Optional[Sequence[ZooEntry]] = None) -> str:
  entries = list(REGISTRY.values()) if entries is None else list(entries)
  header = ["name", "size", "params", "language", "cased", "format", "corpus / note", "local"]
  rows = []
  for x in entries:
    d = default_dir(x.name)
    rows.append([x.name, x.size, f"{x.params / 1e6:.1f}M", x.language, "yes" if x.cased else "no", x.fmt,
                 x.corpus + (f"; {x.note}" if x.note else ""), "yes" if _is_converted(d) else "-"])
  widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
  fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
  return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows] +
                   [f"\n{len(entries)} models; converted models live in {default_root()}/NAME "
                    "('/' -> '--'). `python -m bert_jax.convert zoo --name=NAME` shows the source and the "
                    "convert commands."])
