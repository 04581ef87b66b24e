"""The control-plane HTTP API (FastAPI): `tickwarden.api.main.create_app(db, clock)`."""
