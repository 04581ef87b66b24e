"""An environment with `runtime: kubernetes` in a workflow file: its pod, checked as hostile input (no database)."""

from datetime import UTC, datetime

import pytest

from tickwarden.errors import InvalidInput
from tickwarden.workflow_file import parse_text

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


def environment(body: str) -> str:
    return f"tenants: [{{name: acme}}]\nenvironments:\n  - name: etl\n{body}"


def pod(body: str):
    [(_, spec)] = parse_text(environment(body), "f.yaml", NOW).environments
    return spec.pod()


def test_a_process_environment_has_no_pod():
    assert pod("    idle_timeout_seconds: 60\n") is None


def test_a_kubernetes_environment_gets_its_pod_with_defaults():
    assert pod("    runtime: kubernetes\n    image: registry.example:5000/acme/etl:1.4.2\n") == {
        "image": "registry.example:5000/acme/etl:1.4.2", "python": "python3",
        "resources": {"cpu": "500m", "memory": "512Mi"}, "volume": {"size": "1Gi"}}


def test_resources_and_volume_are_normalised():
    found = pod("    runtime: kubernetes\n    image: etl@sha256:" + "a" * 64 + "\n"
                "    resources: {cpu: 2, memory: 4Gi, nvidia.com/gpu: 1}\n"
                "    volume: {size: 20Gi, storage_class: fast-ssd}\n")
    assert found["resources"] == {"cpu": "2000m", "memory": "4Gi", "nvidia.com/gpu": 1}
    assert found["volume"] == {"size": "20Gi", "storage_class": "fast-ssd"}


@pytest.mark.parametrize(("body", "message"), [
    ("    runtime: kubernetes\n", "environments[0].image: an environment with runtime kubernetes needs an image."),
    ("    runtime: kubernetes\n    image: acme/etl\n", "needs a tag or a digest"),
    ("    runtime: kubernetes\n    image: 'acme/etl:1; rm -rf /'\n", "not an image reference"),
    ("    runtime: kubernetes\n    image: ACME/etl:1\n", "not an image reference"),
    ("    image: acme/etl:1\n", "environments[0].image: only an environment with runtime kubernetes takes this key."),
    ("    runtime: kubernetes\n    image: a:1\n    resources: {cpu: 0.0001}\n", "resources.cpu: a CPU quantity"),
    ("    runtime: kubernetes\n    image: a:1\n    resources: {cpu: 1000}\n", "resources.cpu: a CPU quantity"),
    ("    runtime: kubernetes\n    image: a:1\n    resources: {memory: 1Ei}\n", "resources.memory: a memory quantity"),
    ("    runtime: kubernetes\n    image: a:1\n    resources: {memory: 1Mi}\n", "resources.memory: a memory quantity"),
    ("    runtime: kubernetes\n    image: a:1\n    resources: {nvidia.com/gpu: true}\n", "a whole number of GPUs"),
    ("    runtime: kubernetes\n    image: a:1\n    resources: {nvidia.com/gpu: 9}\n", "a whole number of GPUs"),
    ("    runtime: kubernetes\n    image: a:1\n    resources: {ephemeral-storage: 1Gi}\n", "unknown resource"),
    ("    runtime: kubernetes\n    image: a:1\n    volume: {size: 100Ti}\n", "volume.size: a disk size"),
    ("    runtime: kubernetes\n    image: a:1\n    volume: {size: 10GB}\n", "volume.size: a disk size"),
    ("    runtime: kubernetes\n    image: a:1\n    volume: {storage_class: Fast_SSD}\n", "not a storage class name"),
    ("    runtime: kubernetes\n    image: a:1\n    python: 'python3 -c evil'\n", "plain command or path"),
    ("    runtime: docker\n", "environments[0].runtime"),
])
def test_a_bad_pod_is_one_clear_sentence(body, message):
    with pytest.raises(InvalidInput) as caught:
        parse_text(environment(body), "f.yaml", NOW)
    text = str(caught.value)
    assert message in text and text.count(". ") == 0 and "\n" not in text
