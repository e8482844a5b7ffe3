"""A SentencePiece model file (google-research/albert's 30k-clean.model) -> vocab.txt + tokenizer.json.

The English ALBERT TF checkpoints ship their tokenizer as a SentencePiece ModelProto (30k-clean.model, with
30k-clean.vocab: the same pieces as "piece<TAB>score" lines). This package tokenizes such a vocab with a Hugging
Face tokenizer.json holding the Unigram model (tokenization.SentencePieceTokenizer), so the import writes:

  vocab.txt       the pieces in id order, SentencePiece's <pad>/<unk> named [PAD]/[UNK] (ids unchanged)
  tokenizer.json  Unigram(pieces, scores) behind ALBERT's normaliser (`` and '' -> ", NFKD + accents stripped
                  + lower case when do_lower_case, the model's precompiled character map, runs of spaces -> one),
                  a Metaspace pre-tokenizer and the [CLS] $A [SEP] template: what transformers' AlbertConverter
                  builds from the same file.

The ModelProto is read with a small protobuf wire-format reader (no sentencepiece or generated _pb2 module):
ModelProto.pieces = 1 (SentencePiece: piece = 1, score = 2, type = 3), normalizer_spec = 3 (name = 1,
precompiled_charsmap = 2, add_dummy_prefix = 3, remove_extra_whitespaces = 4).
"""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import Dict, Iterator, List, Optional, Tuple

from bert_jax.convert.mapping import ConversionError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@dataclasses.dataclass
class SentencePieceModel:
  pieces: List[Tuple[str, float, int]]     # (piece, score, type) in id order
  normalizer: str = ""                     # e.g. "nmt_nfkc"
  charsmap: bytes = b""
  add_dummy_prefix: bool = True
  remove_extra_whitespaces: bool = True

  @property
  def unk_id(self) -> int:
    return next((i for i, p in enumerate(self.pieces) if p[2] == UNKNOWN), 0)


def _varint(buf: bytes, pos: int) -> Tuple[int, int]:
  result = shift = 0
  while True:
    if pos >= len(buf):
      raise ValueError("truncated varint")
    b = buf[pos]
    pos += 1
    result |= (b & 0x7F) << shift
    if not b & 0x80:
      return result, pos
    shift += 7
    if shift > 63:
      raise ValueError("varint too long")


def _fields(buf: bytes) -> Iterator[Tuple[int, int, object]]:
  """(field number, wire type, value) of a protobuf message: ints for varints, bytes for length-delimited,
  raw 4/8 bytes for fixed32/fixed64."""
  pos = 0
  while pos < len(buf):
    key, pos = _varint(buf, pos)
    field, wire = key >> 3, key & 7
    if wire == 0:
      value, pos = _varint(buf, pos)
    elif wire == 1:
      value, pos = buf[pos:pos + 8], pos + 8
    elif wire == 2:
      n, pos = _varint(buf, pos)
      value, pos = buf[pos:pos + n], pos + n
    elif wire == 5:
      value, pos = buf[pos:pos + 4], pos + 4
    else:
      raise ValueError(f"unsupported protobuf wire type {wire}")
    if pos > len(buf):
      raise ValueError("truncated message")
    yield field, wire, value


def read_model(path: str) -> SentencePieceModel:
  """The pieces and normaliser of a SentencePiece .model file; ConversionError naming it when unreadable."""
  try:
    with open(path, "rb") as f:
      data = f.read()
    pieces, norm = [], {}
    for field, wire, value in _fields(data):
      if field == 1 and wire == 2:
        piece, score, kind = None, 0.0, NORMAL
        for f2, w2, v2 in _fields(value):
          if f2 == 1 and w2 == 2:
            piece = v2.decode("utf-8")
          elif f2 == 2 and w2 == 5:
            score = struct.unpack("<f", v2)[0]
          elif f2 == 3 and w2 == 0:
            kind = int(v2)
        if piece is None:
          raise ValueError(f"piece {len(pieces)} has no text")
        pieces.append((piece, float(score), kind))
      elif field == 3 and wire == 2:
        for f2, w2, v2 in _fields(value):
          norm[f2] = v2
  except (OSError, ValueError, UnicodeDecodeError, struct.error) as e:
    raise ConversionError(f"{path}: not a readable SentencePiece model ({e})") from e
  if not pieces:
    raise ConversionError(f"{path}: not a SentencePiece model (no pieces)")
  return SentencePieceModel(
      pieces=pieces, normalizer=norm.get(1, b"").decode("utf-8", "replace") if 1 in norm else "",
      charsmap=bytes(norm.get(2, b"")), add_dummy_prefix=bool(norm.get(3, 1)),
      remove_extra_whitespaces=bool(norm.get(4, 1)))


def vocab_pieces(model: SentencePieceModel) -> List[str]:
  """The pieces in id order as vocab.txt lines: <pad>/<unk> as [PAD]/[UNK] (the names this package's tokenizer
  requires) when those are absent."""
  pieces = [p[0].replace("\n", " ") for p in model.pieces]
  for sp, bert in (("<pad>", "[PAD]"), ("<unk>", "[UNK]")):
    if sp in pieces and bert not in pieces:
      pieces[pieces.index(sp)] = bert
  return pieces


def build_tokenizer(model: SentencePieceModel, do_lower_case: bool = True):
  """A tokenizers.Tokenizer of `model` (module docstring)."""
  from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
  tok = Tokenizer(models.Unigram([(p, s) for p, s, _ in model.pieces], unk_id=model.unk_id, byte_fallback=False))
  steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
  if do_lower_case:
    steps += [normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase()]
  if model.charsmap:
    steps.append(normalizers.Precompiled(model.charsmap))
  if model.remove_extra_whitespaces:
    steps.append(normalizers.Replace(Regex(" {2,}"), " "))
  tok.normalizer = normalizers.Sequence(steps)
  scheme = "always" if model.add_dummy_prefix else "never"
  tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme)
  tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=scheme)
  ids: Dict[str, int] = {p[0]: i for i, p in enumerate(model.pieces)}
  if "[CLS]" in ids and "[SEP]" in ids:
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
  return tok


def write_vocab_and_tokenizer(model_path: str, out_dir: str, do_lower_case: bool = True) -> Tuple[str, int]:
  """out_dir/vocab.txt + out_dir/tokenizer.json from a SentencePiece .model; returns (vocab path, pieces)."""
  model = read_model(model_path)
  vocab = os.path.join(out_dir, "vocab.txt")
  with open(vocab, "w", encoding="utf-8") as f:
    f.writelines(p + "\n" for p in vocab_pieces(model))
  build_tokenizer(model, do_lower_case).save(os.path.join(out_dir, "tokenizer.json"))
  return vocab, len(model.pieces)


def find_model(folder: str) -> Optional[str]:
  """The SentencePiece model beside a checkpoint: the one *.model file (30k-clean.model preferred among several)
  in its folder, else in that folder's assets/ or its parent's assets/ (a TF-Hub module: variables/variables.*
  beside assets/30k-clean.model); None when there is none. Several others: ConversionError listing them."""
  for d in (folder, os.path.join(folder, "assets"), os.path.join(os.path.dirname(os.path.abspath(folder)), "assets")):
    try:
      names = sorted(n for n in os.listdir(d) if n.endswith(".model") and os.path.isfile(os.path.join(d, n)))
    except OSError:
      continue
    if len(names) == 1 or "30k-clean.model" in names:
      return os.path.join(d, "30k-clean.model" if "30k-clean.model" in names else names[0])
    if names:
      raise ConversionError(f"{d}: several SentencePiece models ({', '.join(names)}); pass --vocab=PATH.model")
  return None
