"""The README is a front page and docs/ holds the details: the README stays short, shows CI's test command
verbatim, and every link in it and in docs/ resolves; each docs page starts from a command."""

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
PAGES = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def _read(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


def _anchors(path):
  """GitHub's heading anchors of a markdown file: lower case, punctuation dropped, spaces as hyphens."""
  text = re.sub(r"```.*?```", "", _read(path), flags=re.S)
  return {re.sub(r"[^\w\- ]", "", m.strip().lower()).replace(" ", "-")
          for m in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def test_readme_is_a_front_page_of_at_most_300_lines():
  assert len(_read(README).splitlines()) <= 300


def test_readme_shows_the_command_ci_runs_verbatim_and_the_quick_demo_first():
  readme = _read(README)
  ci = [line for line in _read(os.path.join(ROOT, ".ci", "run")).splitlines() if "pytest" in line and "pip" in line]
  assert len(ci) == 1
  assert ci[0] + "\n" in readme
  assert 'python -m pytest -q -n 2 -m "not slow" tests\n' in readme
  quick = readme.index("python demo.py --quick")
  assert quick < readme.index("python demo.py --workdir") < readme.index(ci[0])
  assert "python -m venv .venv && . .venv/bin/activate" in readme


def test_every_docs_page_is_in_the_readme_map_and_starts_from_a_command():
  readme = _read(README)
  assert len(PAGES) >= 8
  for page in PAGES:
    name = os.path.relpath(page, ROOT)
    assert f"]({name})" in readme, f"{name} is not in the README's documentation map"
    body = _read(page).split("\n", 1)[1].lstrip("\n")   # what follows the page's title
    assert body.startswith("```bash\n"), f"{name} does not start from a command"


def test_every_relative_link_in_the_readme_and_docs_resolves():
  broken = []
  for path in [README] + PAGES:
    text = re.sub(r"```.*?```", "", _read(path), flags=re.S)
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
      if re.match(r"[a-z]+:", link):
        continue
      target, _, anchor = link.partition("#")
      target = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
      if not os.path.exists(target):
        broken.append(f"{os.path.relpath(path, ROOT)}: {link} (no such file)")
      elif anchor and anchor not in _anchors(target):
        broken.append(f"{os.path.relpath(path, ROOT)}: {link} (no such heading)")
  assert not broken, "\n".join(broken)


def test_the_docs_name_no_removed_package_or_tests_only_config_field():
  for path in [README] + PAGES:
    text = _read(path)
    for gone in ("bert_jax/training/", "bert_jax.training", "watchdog.fault", "../shared"):
      assert gone not in text, f"{os.path.relpath(path, ROOT)} mentions {gone}"
