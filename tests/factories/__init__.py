"""One module per broker kind: NAME, optional SERVICE, make_config(ctx) -> BrokerConfig."""
