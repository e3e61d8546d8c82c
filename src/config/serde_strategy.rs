//! `Strategy` in configuration files: written as the tagged form, read from
//! a `FromStr` string or the strict tagged form. Both go through the table
//! of strategies and [`Strategy::params`], as `FromStr` and `Display` do.

use std::fmt;

use serde::de::{self, MapAccess, Unexpected, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Param, Strategy};
use crate::int::wide;

impl Serialize for Strategy {
    /// `{"type": NAME, key: value, ...}`; every parameter is written
    /// (cache files as `null` when unset).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut copy = self.clone();
        let params = copy.params();
        let mut map = serializer.serialize_map(Some(params.len() + 1))?;
        map.serialize_entry("type", self.name())?;
        for param in params {
            match param {
                Param::Number { key, value, .. } => map.serialize_entry(key, value)?,
                Param::File { key, value, .. } => map.serialize_entry(key, value)?,
            }
        }
        map.end()
    }
}

/// A parameter's value in the tagged form.
enum Value {
    Number(usize),
    Text(String),
    Null,
}

impl Value {
    fn unexpected(&self) -> Unexpected<'_> {
        match self {
            Value::Number(n) => Unexpected::Unsigned(wide(*n)),
            Value::Text(t) => Unexpected::Str(t),
            Value::Null => Unexpected::Unit,
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-negative integer, a file path or null")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        usize::try_from(v)
            .map(Value::Number)
            .map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        u64::try_from(v)
            .map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            .and_then(|v| self.visit_u64(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Text(v.to_string()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// `` `a`, `b` `` for serde-style messages.
fn quoted(names: impl Iterator<Item = &'static str>) -> String {
    names
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

struct StrategyVisitor;

impl<'de> Visitor<'de> for StrategyVisitor {
    type Value = Strategy;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a strategy: a string such as \"ngram-mod:n=24\" or an object such as \
             {\"type\": \"ngram-mod\", \"n\": 24}",
        )
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Strategy, E> {
        v.parse().map_err(E::custom)
    }

    /// The tagged form: `type` and the strategy's own keys, each at most
    /// once; left-out parameters keep [`Strategy::from_name`]'s defaults.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strategy, A::Error> {
        let mut name: Option<String> = None;
        let mut values: Vec<(String, Value)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "type" {
                if name.is_some() {
                    return Err(de::Error::duplicate_field("type"));
                }
                name = Some(map.next_value()?);
            } else {
                values.push((key, map.next_value()?));
            }
        }
        let name = name.ok_or_else(|| de::Error::missing_field("type"))?;
        let mut strategy = Strategy::from_name(&name).ok_or_else(|| {
            de::Error::custom(format_args!(
                "unknown variant `{name}`, expected one of {}",
                quoted(Strategy::names())
            ))
        })?;
        let mut params = strategy.params();
        let mut seen: Vec<&'static str> = Vec::new();
        for (key, value) in values {
            let Some(param) = params.iter_mut().find(|p| p.answers_to(&key)) else {
                let keys = quoted(strategy_keys(&name));
                return Err(de::Error::custom(format_args!(
                    "unknown field `{key}`, expected {keys}"
                )));
            };
            let field = param.field();
            if seen.contains(&field) {
                return Err(de::Error::duplicate_field(field));
            }
            seen.push(field);
            match (param, value) {
                (Param::Number { value, .. }, Value::Number(n)) => **value = n,
                (Param::File { value, .. }, Value::Text(path)) => {
                    **value = Some(path.into());
                }
                (Param::File { value, .. }, Value::Null) => **value = None,
                (Param::Number { .. }, other) => {
                    return Err(de::Error::invalid_type(
                        other.unexpected(),
                        &"a non-negative integer",
                    ))
                }
                (Param::File { .. }, other) => {
                    return Err(de::Error::invalid_type(
                        other.unexpected(),
                        &"a file path or null",
                    ))
                }
            }
        }
        drop(params);
        strategy.validate().map_err(de::Error::custom)?;
        Ok(strategy)
    }
}

/// The tagged form's keys of the strategy called `name`.
fn strategy_keys(name: &str) -> impl Iterator<Item = &'static str> {
    let mut strategy = Strategy::from_name(name);
    let keys: Vec<&'static str> = strategy
        .iter_mut()
        .flat_map(Strategy::params)
        .map(|p| p.field())
        .collect();
    keys.into_iter()
}

impl<'de> Deserialize<'de> for Strategy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Strategy, D::Error> {
        deserializer.deserialize_any(StrategyVisitor)
    }
}
