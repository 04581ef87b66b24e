"""A workflow keeps step outputs only when it asks: the worker drops them before the write."""

from __future__ import annotations

from datetime import UTC, datetime

from tickwarden.models import AttemptOutcome
from tickwarden.worker import Result, StepRecord, _without_outputs
from tickwarden.workflow_file import WorkflowDefinition

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_without_outputs_drops_every_output_and_keeps_rows_and_logs() -> None:
    steps = [StepRecord("load", 0, "succeeded", log="loaded", output={"rows": 3, "customer": "data"}),
             StepRecord("check", 1, "succeeded", output=[1, 2])]
    result = Result(AttemptOutcome(status="succeeded", log_tail="tail", outputs={"load": {"rows": 3}}, rows=3), steps)
    kept = _without_outputs(result)
    assert kept.outcome.outputs == {} and kept.outcome.rows == 3 and kept.outcome.log_tail == "tail"
    assert [s.row()["output"] for s in kept.steps] == [None, None]
    assert [s.log for s in kept.steps] == ["loaded", ""]


def test_keep_outputs_is_a_workflow_field_that_defaults_to_false() -> None:
    base = {"name": "w", "environment": "default", "publisher": "ops@acme.test", "schedule": {"cron": "0 2 * * *"}}
    assert WorkflowDefinition.model_validate(base).keep_outputs is False
    assert WorkflowDefinition.model_validate({**base, "keep_outputs": True}).keep_outputs is True


def test_a_step_that_returns_nothing_keeps_nothing_without_scrubbing() -> None:
    from tickwarden import worker

    # None carries nothing of a secret: kept as it is, not scanned ("null" is no secret's text).
    assert worker._small(None, ["null", "s3cr3t-value"]) is None
    assert worker._small({"v": "s3cr3t-value"}, ["s3cr3t-value"]) == {"omitted": "the output contained a secret"}


def test_a_lost_lease_flag_is_set_once_and_read_by_the_step_loop() -> None:
    from tickwarden.worker import Watch

    watch = Watch(object(), 10.0, 0.0, None)  # type: ignore[arg-type]
    assert not watch.lost.is_set()
    watch.lost.set()
    assert watch.lost.is_set()
