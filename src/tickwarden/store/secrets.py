"""Tenant secrets: sealed values in, sealed values out; encryption lives in `tickwarden.secrets`."""

from __future__ import annotations

from datetime import datetime

from tickwarden.models import SealedSecret, SecretInfo, from_row
from tickwarden.store.base import StoreBase


class SecretsRepository(StoreBase):
    def upsert_secret(self, tenant_id: int, name: str, key_id: str, ciphertext: bytes, now: datetime) -> SecretInfo:
        row = self._row("secrets_upsert", {"tenant_id": tenant_id, "name": name, "key_id": key_id,
                                          "ciphertext": ciphertext, "now": now})
        assert row is not None
        return from_row(SecretInfo, row)

    def delete_secret(self, tenant_id: int, name: str) -> bool:
        return self._execute("secrets_delete", {"tenant_id": tenant_id, "name": name}) > 0

    def list_secrets(self, tenant_id: int) -> list[SecretInfo]:
        return [from_row(SecretInfo, row) for row in self._rows("secrets_list", {"tenant_id": tenant_id})]

    def sealed_secrets(self, tenant_id: int, names: list[str]) -> list[SealedSecret]:
        rows = self._rows("secrets_get_sealed", {"tenant_id": tenant_id, "names": names})
        return [SealedSecret(tenant_id=tenant_id, name=r["name"], key_id=r["key_id"],
                             ciphertext=bytes(r["ciphertext"])) for r in rows]

    def claim_secrets_for_rotation(self, key_id: str, limit: int) -> list[SealedSecret]:
        rows = self._rows("secrets_claim_for_rotation", {"key_id": key_id, "limit": limit})
        return [SealedSecret(tenant_id=r["tenant_id"], name=r["name"], key_id=r["key_id"],
                             ciphertext=bytes(r["ciphertext"])) for r in rows]

    def reseal_secret(self, old: SealedSecret, key_id: str, ciphertext: bytes) -> bool:
        return self._execute("secrets_reseal", {"tenant_id": old.tenant_id, "name": old.name, "key_id": key_id,
                                               "ciphertext": ciphertext, "old_key_id": old.key_id}) > 0

    def run_identity(self, run_id: int, tenant_id: int) -> tuple[str, str, datetime] | None:
        """The run key's names: tenant, workflow and tick; None when the run no longer exists."""
        row = self._row("secrets_run_identity", {"run_id": run_id, "tenant_id": tenant_id})
        return (row["tenant"], row["workflow"], row["scheduled_for"]) if row else None

    def platform_identity(self) -> str:
        row = self._row("secrets_platform_identity")
        assert row is not None
        return str(row["identity"])
