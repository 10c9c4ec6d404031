//! Human units for sizes, rates and durations: `"4KiB"`, `"50MiB/s"`,
//! `"20k ops/s"`, `"10ms"`.
//!
//! Grammar: a decimal number (`1`, `1.5`), optional spaces, then a unit, case
//! insensitive. Sizes: `B`, `k`/`KB` (10³), `KiB` (2¹⁰), `M`/`MB`, `MiB`,
//! `G`/`GB`, `GiB`, `T`/`TB`, `TiB`; a bare number is bytes. Rates: a size
//! followed by `/s` (bytes per second), or a count with an optional `k`/`M`/`G`
//! multiplier followed by `ops/s`, `op/s` or `iops`. Durations: `ns`, `us`
//! (`µs`), `ms`, `s`, `m`/`min`, `h`. Fractions are rounded to the nearest
//! whole byte, operation or nanosecond; values that do not fit in 64 bits are
//! errors, never wrapped.

use std::fmt;
use std::time::Duration;

use serde::de::{self, value::MapAccessDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a quantity could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {input:?}: {reason} (examples: {examples})")]
pub struct UnitError {
    what: &'static str,
    input: String,
    reason: String,
    examples: &'static str,
}

impl UnitError {
    fn new(what: &'static str, input: &str, reason: impl Into<String>) -> Self {
        let examples = match what {
            "size" => "\"4096\", \"4KiB\", \"1.5GiB\"",
            "rate" => "\"50MiB/s\", \"20k ops/s\", \"1000 iops\"",
            _ => "\"10ms\", \"1s\", \"500us\"",
        };
        Self {
            what,
            input: input.chars().take(64).collect(),
            reason: reason.into(),
            examples,
        }
    }
}

/// What a rate counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateUnit {
    /// Bytes per second: a request costs its size.
    Bytes,
    /// Operations per second: a request costs one token.
    Ops,
}

/// A rate: `per_second` tokens per second of `unit`.
///
/// Serializes as a string (`"52428800 B/s"`, `"20000 ops/s"`); deserializes
/// from such a string with any unit of the module's grammar, or from a table
/// `{ bytes_per_sec = N }` / `{ ops_per_sec = N }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Tokens per second.
    pub per_second: u64,
    /// What a token is.
    pub unit: RateUnit,
}

impl Rate {
    /// `n` bytes per second.
    pub const fn bytes_per_sec(n: u64) -> Self {
        Self {
            per_second: n,
            unit: RateUnit::Bytes,
        }
    }

    /// `n` operations per second.
    pub const fn ops_per_sec(n: u64) -> Self {
        Self {
            per_second: n,
            unit: RateUnit::Ops,
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.unit {
            RateUnit::Bytes => write!(f, "{} B/s", self.per_second),
            RateUnit::Ops => write!(f, "{} ops/s", self.per_second),
        }
    }
}

impl std::str::FromStr for Rate {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        parse_rate(s)
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            bytes_per_sec: Option<u64>,
            ops_per_sec: Option<u64>,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Rate;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a rate such as \"50MiB/s\" or \"20k ops/s\", \
                     or a table { bytes_per_sec = N } or { ops_per_sec = N }",
                )
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Rate, E> {
                parse_rate(s).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Rate, A::Error> {
                match Table::deserialize(MapAccessDeserializer::new(map))? {
                    Table {
                        bytes_per_sec: Some(n),
                        ops_per_sec: None,
                    } => Ok(Rate::bytes_per_sec(n)),
                    Table {
                        bytes_per_sec: None,
                        ops_per_sec: Some(n),
                    } => Ok(Rate::ops_per_sec(n)),
                    _ => Err(de::Error::custom(
                        "a rate table needs exactly one of bytes_per_sec or ops_per_sec",
                    )),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// A byte count that (de)serializes with units (`"4KiB"`) or as an integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Size(pub u64);

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Int(u64),
            Text(String),
        }
        match Repr::deserialize(d)
            .map_err(|_| serde::de::Error::custom("expected a size such as 4096 or \"4KiB\""))?
        {
            Repr::Int(n) => Ok(Size(n)),
            Repr::Text(s) => parse_size(&s).map(Size).map_err(serde::de::Error::custom),
        }
    }
}

/// Parses a byte size such as `"4KiB"` or `"1.5 GB"`.
pub fn parse_size(input: &str) -> Result<u64, UnitError> {
    let (number, unit) = split(input).map_err(|r| UnitError::new("size", input, r))?;
    let mult = size_multiplier(unit)
        .ok_or_else(|| UnitError::new("size", input, format!("unknown unit {unit:?}")))?;
    scale(number, mult).map_err(|r| UnitError::new("size", input, r))
}

/// Parses a rate such as `"50MiB/s"`, `"20k ops/s"` or `"1000 iops"`.
pub fn parse_rate(input: &str) -> Result<Rate, UnitError> {
    let err = |r: String| UnitError::new("rate", input, r);
    let (number, unit) = split(input).map_err(err)?;
    let lower = unit.to_ascii_lowercase();
    let ops_unit = ["ops/s", "op/s", "iops", "ops/sec", "op/sec"]
        .iter()
        .find_map(|suffix| lower.strip_suffix(suffix));
    if let Some(prefix) = ops_unit {
        let mult = match prefix.trim_end() {
            "" => 1,
            "k" => 1_000,
            "m" => 1_000_000,
            "g" => 1_000_000_000,
            other => return Err(err(format!("unknown multiplier {other:?} before ops/s"))),
        };
        return scale(number, mult).map(Rate::ops_per_sec).map_err(err);
    }
    let size_unit = lower
        .strip_suffix("/s")
        .or_else(|| lower.strip_suffix("/sec"))
        .or_else(|| lower.strip_suffix("ps"))
        .ok_or_else(|| err("a rate ends in /s, ops/s or iops".to_string()))?;
    let mult = size_multiplier(size_unit.trim_end())
        .ok_or_else(|| err(format!("unknown unit {:?}", unit)))?;
    scale(number, mult).map(Rate::bytes_per_sec).map_err(err)
}

/// Parses a duration such as `"10ms"` or `"1.5s"`; a unit is required.
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    let err = |r: String| UnitError::new("duration", input, r);
    let (number, unit) = split(input).map_err(err)?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" | "sec" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "" => return Err(err("a unit is required (ns, us, ms, s, min, h)".to_string())),
        other => return Err(err(format!("unknown unit {other:?}"))),
    };
    scale(number, mult).map(Duration::from_nanos).map_err(err)
}

/// A duration that (de)serializes with units (`"10ms"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{}ns", self.0.as_nanos()))
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s)
            .map(HumanDuration)
            .map_err(serde::de::Error::custom)
    }
}

fn size_multiplier(unit: &str) -> Option<u64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "ki" | "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mi" | "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gi" | "gib" => 1 << 30,
        "t" | "tb" => 1_000_000_000_000,
        "ti" | "tib" => 1 << 40,
        _ => return None,
    })
}

/// Splits `"  12.5 MiB/s "` into `("12.5", "MiB/s")`.
fn split(input: &str) -> Result<(&str, &str), String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty".to_string());
    }
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(end);
    if number.is_empty() {
        return Err("expected a number first".to_string());
    }
    Ok((number, unit.trim_start()))
}

/// `number × mult`, rounded to the nearest integer, checked for overflow.
fn scale(number: &str, mult: u64) -> Result<u64, String> {
    let digits: String = number.chars().filter(|&c| c != '_').collect();
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, f),
        None => (digits.as_str(), ""),
    };
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(format!("{number:?} is not a number"));
    }
    let too_big = || "value does not fit in 64 bits".to_string();
    let int_val: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_big())?
    };
    let mut total = int_val.checked_mul(mult as u128).ok_or_else(too_big)?;
    if !frac.is_empty() {
        // Exact decimal arithmetic on at most 18 fractional digits.
        let frac = &frac[..frac.len().min(18)];
        let denom = 10u128.pow(frac.len() as u32);
        let f: u128 = frac
            .parse()
            .map_err(|_| format!("{number:?} is not a number"))?;
        total = total
            .checked_add((f * mult as u128 + denom / 2) / denom)
            .ok_or_else(too_big)?;
        if total == 0 && f > 0 {
            // Not the 0 that pauses a limit: a value too small to count.
            return Err(format!(
                "{number:?} rounds to 0: values are whole bytes or operations (per second), \
                 so give at least 1"
            ));
        }
    }
    u64::try_from(total).map_err(|_| too_big())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_fraction_that_rounds_to_zero_is_refused() {
        let e = parse_rate("0.4 B/s").unwrap_err().to_string();
        assert!(e.contains("rounds to 0"), "{e}");
        assert!(parse_size("0.2B")
            .unwrap_err()
            .to_string()
            .contains("rounds to 0"));
        assert_eq!(parse_rate("0.5 B/s").unwrap(), Rate::bytes_per_sec(1));
        assert_eq!(parse_rate("0 B/s").unwrap(), Rate::bytes_per_sec(0));
        assert_eq!(parse_rate("0.0 B/s").unwrap(), Rate::bytes_per_sec(0));
        assert!(parse_rate("0.0004 KiB/s")
            .unwrap_err()
            .to_string()
            .contains("rounds to 0"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size(" 4 kib ").unwrap(), 4096);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("10MB").unwrap(), 10_000_000);
        assert_eq!(parse_size("1_000").unwrap(), 1000);
        assert!(parse_size("").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("4 parsecs").is_err());
        assert!(parse_size("1.2.3").is_err());
        assert!(parse_size("99999999999TiB").is_err());
        assert!(parse_size("-1").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(
            parse_rate("50MiB/s").unwrap(),
            Rate::bytes_per_sec(50 << 20)
        );
        assert_eq!(
            parse_rate("100 MB/s").unwrap(),
            Rate::bytes_per_sec(100_000_000)
        );
        assert_eq!(parse_rate("20k ops/s").unwrap(), Rate::ops_per_sec(20_000));
        assert_eq!(parse_rate("20kops/s").unwrap(), Rate::ops_per_sec(20_000));
        assert_eq!(parse_rate("1000 IOPS").unwrap(), Rate::ops_per_sec(1000));
        assert_eq!(parse_rate("1.5k op/s").unwrap(), Rate::ops_per_sec(1500));
        assert_eq!(parse_rate("0 B/s").unwrap(), Rate::bytes_per_sec(0));
        assert_eq!(parse_rate("1MiBps").unwrap(), Rate::bytes_per_sec(1 << 20));
        let e = parse_rate("50MiB").unwrap_err().to_string();
        assert!(e.contains("/s"), "{e}");
        assert!(parse_rate("5x ops/s").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10ms").unwrap(), Duration::from_millis(10));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("2min").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("10 fortnights").is_err());
    }

    #[test]
    fn rate_serde_round_trips_and_accepts_tables() {
        let r = Rate::bytes_per_sec(52_428_800);
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(j, "\"52428800 B/s\"");
        assert_eq!(serde_json::from_str::<Rate>(&j).unwrap(), r);
        let o: Rate = serde_json::from_str(r#"{"ops_per_sec": 7}"#).unwrap();
        assert_eq!(o, Rate::ops_per_sec(7));
        assert!(serde_json::from_str::<Rate>(r#"{"ops_per_sec": 7, "bytes_per_sec": 1}"#).is_err());
        assert!(serde_json::from_str::<Rate>(r#"{}"#).is_err());
        let e = serde_json::from_str::<Rate>("5").unwrap_err().to_string();
        assert!(e.contains("a rate such as"), "{e}");
        let e = serde_json::from_str::<Rate>(r#"{"bits_per_sec": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field"), "{e}");
    }

    proptest! {
        #[test]
        fn display_parses_back(n in any::<u64>(), ops in any::<bool>()) {
            let r = if ops { Rate::ops_per_sec(n) } else { Rate::bytes_per_sec(n) };
            prop_assert_eq!(parse_rate(&r.to_string()).unwrap(), r);
        }

        #[test]
        fn integer_sizes_scale_exactly(n in 0u64..(1 << 40)) {
            prop_assert_eq!(parse_size(&format!("{n}KiB")).unwrap(), n * 1024);
            prop_assert_eq!(parse_size(&n.to_string()).unwrap(), n);
        }

        #[test]
        fn parsers_never_panic(s in "\\PC{0,24}") {
            let _ = parse_size(&s);
            let _ = parse_rate(&s);
            let _ = parse_duration(&s);
        }
    }
}
