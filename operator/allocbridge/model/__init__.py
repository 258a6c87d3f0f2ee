"""Pure data: wire models, custom-resource models and mapping functions. No I/O here."""
