"""The API's interactive documentation works offline: every asset it loads is served by tickwarden."""

import re

import httpx

from tests.apiutil import live_server


def test_docs_load_every_asset_from_tickwarden_itself(db, clock):
    with live_server(db, clock) as base:
        page = httpx.get(f"{base}/docs", timeout=10)
        assert page.status_code == 200
        assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert any(a.endswith("swagger-ui-bundle.js") for a in assets)
        assert any(a.endswith("swagger-ui.css") for a in assets)
        for asset in assets:
            assert asset.startswith("/"), f"{asset} is not served locally"
            assert httpx.get(f"{base}{asset}", timeout=10).status_code == 200, asset
        assert "https://" not in page.text.split("<script>", 1)[0]
        assert httpx.get(f"{base}/openapi.json", timeout=10).status_code == 200
