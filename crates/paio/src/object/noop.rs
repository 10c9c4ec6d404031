//! The pass-through object.

use super::{ConfigError, EnforceError, EnforcementObject, ObjectConfig, Request};
use crate::context::Context;

/// Passes every request at once without touching its content (zero copies).
#[derive(Debug, Clone, Copy, Default)]
pub struct Noop;

impl EnforcementObject for Noop {
    fn kind(&self) -> &'static str {
        "noop"
    }

    fn configure(&self, config: &ObjectConfig) -> Result<(), ConfigError> {
        match config {
            ObjectConfig::Noop => Ok(()),
            other => Err(ConfigError::WrongKind {
                object: "noop",
                given: other.kind(),
            }),
        }
    }

    #[inline]
    fn enforce(&self, _ctx: &Context, _request: &mut Request<'_>) -> Result<u64, EnforceError> {
        Ok(0)
    }

    fn config(&self) -> ObjectConfig {
        ObjectConfig::Noop
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::RequestType;

    #[test]
    fn passes_without_copying() {
        let buf = vec![7u8; 4096];
        let mut request = Request::new(Some(&buf));
        let waited = Noop
            .enforce(&Context::new(RequestType::WRITE, 4096), &mut request)
            .unwrap();
        assert_eq!(waited, 0);
        assert!(request.into_replacement().is_none());
        assert!(Noop.configure(&ObjectConfig::Noop).is_ok());
        let drl = ObjectConfig::Drl(crate::object::DrlConfig::new(
            crate::units::Rate::ops_per_sec(1),
        ));
        assert!(matches!(
            Noop.configure(&drl),
            Err(ConfigError::WrongKind {
                object: "noop",
                given: "drl"
            })
        ));
    }
}
