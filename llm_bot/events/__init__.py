"""The BitBrat wire contracts: models, routing-slip rules, codec, identity rules."""
