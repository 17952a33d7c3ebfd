"""The batch program (ADR 0014), run by real shells against a stand-in ``sbatch``: answers in
order, a chain's later link on the job the line before it printed, the first refusal ends it,
the time budget stops it where it stands, and the reader takes answers whole as they arrive."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servatus import batch
from servatus.batch import Answer, Answers, Item
from servatus.errors import ConfigurationError

SHELLS = [shell for shell in ("dash", "bash", "sh") if shutil.which(shell)]

STAND_IN = """#!/bin/sh
# Reads the script, says what it was asked on stderr, and answers by what the script holds.
script=$(cat)
printf 'asked %s\\n' "$*" >&2
case $script in
*refuse*) echo 'sbatch: error: Batch job submission failed: Invalid partition' >&2; exit 1 ;;
*lost*) echo 'sbatch: error: Socket timed out on send/recv operation' >&2; exit 1 ;;
*garble*) echo 'not a job'; exit 0 ;;
*cluster*) n=$(cat "$0.n" 2>/dev/null || echo 500); echo $((n + 1)) > "$0.n"; echo "$n;west" ;;
*) n=$(cat "$0.n" 2>/dev/null || echo 500); echo $((n + 1)) > "$0.n"; echo "$n" ;;
esac
"""


@pytest.fixture
def sbatch(tmp_path: Path) -> Path:
    path = tmp_path / "sbatch"
    path.write_text(STAND_IN)
    path.chmod(0o755)
    return path


def run(shell: str, sbatch: Path, items: list[Item]) -> tuple[list[Answer], Answers, bytes]:
    done = subprocess.run(
        [shell, "-s", batch.LABEL],
        input=batch.program(str(sbatch), items),
        capture_output=True,
        check=True,
    )
    reader = Answers(len(items))
    return reader.feed(done.stdout), reader, done.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_each_answer_comes_in_order_and_a_later_link_follows_the_job_before_it(
    shell: str, sbatch: Path
) -> None:
    items = [
        Item("#!/bin/sh\necho 'quotes \" and $HOME stay as they are'\n"),
        Item("#!/bin/sh\n#SBATCH --job-name=link2\n", after_item=0),
        Item("#!/bin/sh\ncluster\n", after_job=77),
        Item("no newline at the end", after_item=2),
    ]
    answers, reader, stderr = run(shell, sbatch, items)
    assert answers == [
        Answer(0, 0, "500"),
        Answer(1, 0, "501"),
        Answer(2, 0, "502;west"),
        Answer(3, 0, "503"),
    ]
    assert reader.stopped is None and not reader.garbled
    asked = {index: said.decode() for index, said in batch.item_errors(stderr).items()}
    assert asked == {
        0: "asked --parsable\n",
        1: "asked --parsable --dependency=afterany:500\n",
        2: "asked --parsable --dependency=afterany:77\n",
        3: "asked --parsable --dependency=afterany:502\n",
    }


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("word", ["refuse", "lost", "garble"])
def test_the_first_item_without_a_job_number_ends_the_batch(
    shell: str, sbatch: Path, word: str
) -> None:
    items = [Item("one\n"), Item(f"{word}\n"), Item("never sent\n")]
    answers, _, stderr = run(shell, sbatch, items)
    status = 0 if word == "garble" else 1
    assert answers == [Answer(0, 0, "500"), Answer(1, status, None)]
    assert sorted(batch.item_errors(stderr)) == [0, 1]
    assert (sbatch.parent / "sbatch.n").read_text() == "501\n"  # the third never ran


@pytest.mark.parametrize("shell", SHELLS)
def test_past_its_budget_a_batch_sends_nothing_more_and_says_where_it_stopped(
    shell: str, sbatch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch, "BUDGET_SECONDS", 0)
    answers, reader, _ = run(shell, sbatch, [Item("a\n"), Item("b\n"), Item("c\n")])
    assert answers == [Answer(0, 0, "500")]
    assert reader.stopped == 1


def test_a_script_with_a_nul_byte_is_refused_before_anything_runs() -> None:
    with pytest.raises(ConfigurationError, match="NUL"):
        batch.program("/usr/bin/sbatch", [Item("a\0b\n")])


def test_a_script_holding_a_likely_delimiter_gets_another(sbatch: Path) -> None:
    items = [Item(f"SERVATUS_{'0' * 24}\nSERVATUS_\n")]
    path, read = batch.read_program(batch.program(str(sbatch), items))
    assert (path, read) == (str(sbatch), items)


@given(
    scripts=st.lists(st.text(st.characters(blacklist_characters="\0")), min_size=1, max_size=5),
    links=st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_a_program_reads_back_as_the_items_it_was_made_of(
    scripts: list[str], links: list[bool]
) -> None:
    items = [
        Item(
            script if script.endswith("\n") else f"{script}\n",
            after_item=index - 1 if index and links[index] else None,
            after_job=None if index and links[index] else 40 + index,
        )
        for index, script in enumerate(scripts)
    ]
    assert batch.read_program(batch.program("/opt/slurm/bin/sbatch", items)) == (
        "/opt/slurm/bin/sbatch",
        items,
    )


@given(st.data())
def test_answers_arrive_whole_however_the_stream_is_cut(data: st.DataObject) -> None:
    sent = [Answer(0, 0, "7"), Answer(1, 0, "8;c"), Answer(2, 1, None)]
    stream = b"".join(batch.answer_line(answer) for answer in sent)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=8)))
    reader, got = Answers(3), []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got.extend(reader.feed(stream[start:end]))
    assert got == sent and not reader.garbled


def test_an_answer_out_of_order_or_beyond_the_batch_is_none() -> None:
    reader = Answers(2)
    assert reader.feed(b"@1 0 5.\n@0 0 4.\n") == []
    assert reader.garbled
    reader = Answers(1)
    assert reader.feed(b"@0 0 4.\n@1 0 5.\n") == [Answer(0, 0, "4")]
    assert reader.garbled


def test_batches_hold_at_most_their_count_and_their_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch, "MAX_ALLOCATIONS", 3)
    monkeypatch.setattr(batch, "MAX_BYTES", 100)
    sizes = [10, 10, 10, 10, 60, 50, 500, 1]
    assert [list(part) for part in batch.split(sizes)] == [[0, 1, 2], [3, 4], [5], [6], [7]]
    assert [list(part) for part in batch.split(sizes, 4)] == [[4], [5], [6], [7]]
