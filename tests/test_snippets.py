"""Every ```python block of README.md, of the docs pages that hold the README's longer examples
(``DOC_PAGES``) and of the public objects' docstrings runs as printed; the README's commands are
the ones setup.sh, .ci/run and the ``pmi-decode`` parser accept.

How a block runs (the only substitutions, so a snippet that is wrong fails here):

* Model loading is redirected to tiny random models: ``load_model_and_tokenizer(ID)`` and
  ``AutoTokenizer/AutoModelForCausalLM/AutoModelForSeq2SeqLM.from_pretrained(ID)`` return the
  stand-in that ``STAND_INS`` names for ``ID`` (an id missing there fails the test: add one).
* Names a block uses without defining them are the ones the surrounding text describes
  (``model``, ``tokenizer``, ``inputs``, ``documents``, ``histories``, ``responses``,
  ``document``, ``history``, ``alpha``, ``p``): ``prelude()`` provides them, from a tiny
  decoder-only model. Each block starts from a fresh copy of that namespace.
* Doctest prompts (``>>>``, ``...``) are stripped.

A block that cannot run offline opts out with the marker ``snippet-test: skip <reason>``: in
Markdown on the line right above the fence (``<!-- snippet-test: skip needs a GPU -->``), in a
docstring as the block's first line (``# snippet-test: skip needs a GPU``). The reason is
required, and a marker without one fails.
"""

from __future__ import annotations

import inspect
import re
import shlex
from pathlib import Path

import pytest
import torch
from tiny_models import DIALOGUES, PEAKED, tiny_model, tiny_tokenizer

import pmi_decode
import pmi_decode.metrics
from pmi_decode import build_inputs

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"snippet-test:\s*skip\b\s*(.*?)\s*(?:-->)?\s*$")
FENCE = re.compile(r"^(\s*)```python\s*$")
# The docs pages that took over the README's longer examples: their blocks run like the README's.
DOC_PAGES = ("docs/usage.md", "docs/scoring.md")


def _llama():
    return tiny_model("llama", dtype=torch.float32, logit_scale=PEAKED["llama"]), tiny_tokenizer("llama", chat=True)


def _bart():
    """A tiny BART with facebook/bart-large's own generation defaults (forced BOS/EOS, no-repeat
    3-grams, 4 beams, early stopping, no length limit), which the encoder-decoder example of
    docs/usage.md inherits."""
    model = tiny_model("bart", dtype=torch.float32, logit_scale=PEAKED["bart"])
    config = model.generation_config
    config.forced_bos_token_id, config.forced_eos_token_id = 0, 2
    config.no_repeat_ngram_size, config.num_beams, config.early_stopping = 3, 4, True
    return model, tiny_tokenizer("bart")


def _bloom():
    return tiny_model("bloom", dtype=torch.float32), tiny_tokenizer("bloom")


# The model ids the README and docstrings use, each with a tiny model of the same kind.
STAND_INS = {
    "embedded": _llama,
    "embedded-gemma": _llama,
    "HuggingFaceTB/SmolLM2-135M-Instruct": _llama,
    "facebook/bart-large": _bart,
    "bigscience/bloom-560m": _bloom,
}


def _stand_in(name):
    key = "embedded" if name is None else str(name)
    if key not in STAND_INS:
        raise KeyError(f"no tiny stand-in for model {key!r}: add one to STAND_INS in tests/test_snippets.py")
    return STAND_INS[key]()


def _blocks(text: str, origin: str, *, markdown: bool) -> list:
    """(id, code, skip reason or None) for every ```python block of ``text``."""
    lines, found, i = text.splitlines(), [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, start = len(match.group(1)), i
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:])
            i += 1
        i += 1
        marker_line = lines[start - 1] if markdown and start > 0 else (body[0] if body else "")
        marker = MARKER.search(marker_line) if "snippet-test" in marker_line else None
        code = "\n".join(_strip_prompts(body))
        found.append((f"{origin}:{start + 1}", code, None if marker is None else marker.group(1)))
    return found


def _strip_prompts(body: list[str]) -> list[str]:
    if not any(line.lstrip().startswith(">>>") for line in body):
        return body
    return [line.lstrip()[4:] for line in body if line.lstrip().startswith((">>>", "..."))]


def _public_docstrings():
    for module in (pmi_decode, pmi_decode.metrics):
        for name in module.__all__:
            obj = getattr(module, name)
            yield f"{module.__name__}.{name}", inspect.getdoc(obj)
            if inspect.isclass(obj):
                for attr, value in vars(obj).items():
                    if not attr.startswith("_"):
                        yield f"{module.__name__}.{name}.{attr}", inspect.getdoc(value)


def _all_blocks() -> list:
    blocks = _blocks((ROOT / "README.md").read_text(), "README.md", markdown=True)
    for page in DOC_PAGES:
        blocks += _blocks((ROOT / page).read_text(), page, markdown=True)
    seen = set()
    for origin, doc in _public_docstrings():
        if doc and doc not in seen:
            seen.add(doc)
            blocks += _blocks(doc, origin, markdown=False)
    return blocks


BLOCKS = _all_blocks()


def prelude() -> dict:
    model, tokenizer = _llama()
    documents, histories = [d for d, _ in DIALOGUES[:2]], [h for _, h in DIALOGUES[:2]]
    return {
        "model": model,
        "tokenizer": tokenizer,
        "documents": documents,
        "histories": histories,
        "responses": ["It was built in 1889.", "Kind of Blue came out in 1959."],
        "document": documents[0],
        "history": histories[0],
        "inputs": build_inputs(tokenizer, documents, histories, model=model),
        "alpha": 0.5,
        "p": 0.9,
    }


@pytest.fixture
def stand_ins(monkeypatch):
    import transformers

    import pmi_decode.models

    monkeypatch.setattr(pmi_decode.models, "load_model_and_tokenizer", lambda name="embedded", **kw: _stand_in(name))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda name, *a, **kw: _stand_in(name)[1])
    for auto in (transformers.AutoModelForCausalLM, transformers.AutoModelForSeq2SeqLM):
        monkeypatch.setattr(auto, "from_pretrained", lambda name, *a, **kw: _stand_in(name)[0])


def test_the_readme_and_docstrings_have_snippets():
    """Guards the extraction itself: a regex that found nothing would make every test vacuous."""
    origins = {origin.split(":")[0] for origin, _, _ in BLOCKS}
    assert "README.md" in origins and "pmi_decode.PMIDecode" in origins
    assert sum(origin.startswith("README.md") for origin, _, _ in BLOCKS) >= 5


def test_every_docs_page_with_examples_has_snippets():
    """A page listed in DOC_PAGES that yields no block (moved, renamed, fence changed) fails here."""
    origins = {origin.split(":")[0] for origin, _, _ in BLOCKS}
    for page in DOC_PAGES:
        assert page in origins, f"{page} has no ```python block: update DOC_PAGES"
    assert sum(origin.startswith("docs/usage.md") for origin, _, _ in BLOCKS) >= 5


def _bash_block(text: str, heading: str) -> list[str]:
    """The commands of the first ```bash block under ``heading``, comments and blank lines dropped."""
    section = text.split(f"\n{heading}\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = (line.split("#", 1)[0].strip() for line in block.splitlines())
    return [line for line in lines if line]


def test_ci_runs_the_readmes_test_command():
    """CI must run exactly the command the README gives for the tests, and setup.sh must know both."""
    demo, test = _bash_block((ROOT / "README.md").read_text(), "## Two commands")
    assert (demo, test) == ("bash setup.sh demo", "bash setup.sh test")
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == test
    setup = (ROOT / "setup.sh").read_text()
    assert re.search(r"^\s*test\)\s*shift;\s*exec .*-m pytest", setup, flags=re.M)
    assert re.search(r"^\s*\*\)\s*exec .*pmi-decode\" \"\$@\"", setup, flags=re.M)


def test_the_readmes_command_lines_parse():
    """Each line of the README's command-line block is one the ``pmi-decode`` parser accepts."""
    from pmi_decode.cli import build_parser

    lines = _bash_block((ROOT / "README.md").read_text(), "## Command line")
    assert len(lines) >= 4 and all(line.startswith("pmi-decode ") for line in lines)
    parser = build_parser()
    commands = {action.dest: action for action in parser._actions}["command"].choices
    for line in lines:
        args = shlex.split(line)[1:]
        assert args[0] in commands, f"README: {line!r} names no pmi-decode command"
        if "--help" not in args:
            parsed = parser.parse_args(args)
            assert parsed.command == args[0]


@pytest.mark.parametrize("origin,code,skip", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_snippet_runs(origin, code, skip, stand_ins):
    if skip is not None:
        assert skip, f"{origin}: a snippet-test skip marker needs a reason"
        pytest.skip(f"opted out: {skip}")
    namespace = prelude()
    exec(compile(code, origin, "exec"), namespace)


def test_a_broken_snippet_fails(stand_ins):
    """The runner must not swallow errors: a snippet with a wrong keyword fails."""
    code = "from pmi_decode import PMIDecode\nPMIDecode(0.5, 0.9, modle=model)"
    with pytest.raises(TypeError):
        exec(compile(code, "broken", "exec"), prelude())


def test_markers_are_read():
    text = "<!-- snippet-test: skip needs CUDA -->\n```python\nimport nothing_here\n```\n"
    assert _blocks(text, "x", markdown=True)[0][2] == "needs CUDA"
    assert _blocks("```python\n>>> a = 1\n>>> b = a + 1\n```", "y", markdown=False)[0][1] == "a = 1\nb = a + 1"
