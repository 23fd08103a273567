"""Local fakes of external services, so real client code paths run offline in tests."""
