"""BitBrat's behaviour profile of one event: ``profile`` (the profile of the ``intent``,
``tone`` and ``risk`` annotations, and the gate it sets before any model call or memory
access), ``texts`` (its guidance lines, task line and canned refusals) and ``annotations`` (the
annotations it publishes, the tools it allows).

The modules are the public API; none is imported here."""
