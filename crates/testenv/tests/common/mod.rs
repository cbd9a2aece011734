//! Helpers shared by the integration tests (polling is `nimbus_testenv::eventually`).

pub type TestResult = Result<(), Box<dyn std::error::Error>>;
