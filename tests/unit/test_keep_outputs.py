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
