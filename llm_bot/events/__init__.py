"""The BitBrat wire contracts: models, routing-slip rules, codec, identity rules.

The modules are the public API; none is imported here, so that importing one module (or the
command line) loads only what that module needs."""
