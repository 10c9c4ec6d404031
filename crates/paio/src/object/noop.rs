//! The pass-through object.

use super::{ConfigError, EnforceError, EnforcementObject, ObjectConfig, Outcome};
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
    fn enforce(&self, _ctx: &Context, _data: Option<&[u8]>) -> Result<Outcome, EnforceError> {
        Ok(Outcome::PASS)
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
        let out = Noop
            .enforce(&Context::new(RequestType::WRITE, 4096), Some(&buf))
            .unwrap();
        assert_eq!(out, Outcome::PASS);
        assert!(out.data.is_none());
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
