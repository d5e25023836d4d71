//! GGUF key-value metadata in file order, with typed getters whose errors name the key.

use std::collections::HashMap;

use super::value::{GgufArray, GgufValue};
use crate::error::{FormatError, Result};

/// The metadata of a GGUF file: keys in file order plus a name index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GgufMetadata {
    entries: Vec<(String, GgufValue)>,
    index: HashMap<String, usize>,
}

fn wrong(key: &str, expected: &'static str, v: &GgufValue) -> FormatError {
    FormatError::WrongType {
        key: key.to_string(),
        expected,
        found: v.type_description(),
    }
}

macro_rules! int_getter {
    ($name:ident, $opt:ident, $t:ty, $tn:literal) => {
        #[doc = concat!("The value of `key` as ", $tn, " (any integer type that fits); errors name a missing or mistyped key.")]
        pub fn $name(&self, key: &str) -> Result<$t> {
            self.$opt(key)?
                .ok_or_else(|| FormatError::MissingKey(key.to_string()))
        }

        #[doc = concat!("Like the ", $tn, " getter, but `Ok(None)` when the key is absent.")]
        pub fn $opt(&self, key: &str) -> Result<Option<$t>> {
            match self.get(key) {
                None => Ok(None),
                Some(v) => v
                    .as_int()
                    .and_then(|x| <$t>::try_from(x).ok())
                    .map(Some)
                    .ok_or_else(|| wrong(key, $tn, v)),
            }
        }
    };
}

macro_rules! array_getter {
    ($name:ident, $variant:ident, $t:ty, $tn:literal) => {
        #[doc = concat!("The value of `key` as an ", $tn, "; errors name a missing or mistyped key.")]
        pub fn $name(&self, key: &str) -> Result<&[$t]> {
            match self.get_array(key)? {
                GgufArray::$variant(v) => Ok(v),
                _ => Err(wrong(key, $tn, self.require(key)?)),
            }
        }
    };
}

impl GgufMetadata {
    /// Empty metadata.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key`; an existing key is an error ([`FormatError::DuplicateKey`]).
    pub fn insert(&mut self, key: String, value: GgufValue) -> Result<()> {
        if self.index.contains_key(&key) {
            return Err(FormatError::DuplicateKey(key));
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        Ok(())
    }

    /// Sets `key`, replacing an existing value in place.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<GgufValue>) {
        let key = key.into();
        match self.index.get(&key) {
            Some(&i) => self.entries[i].1 = value.into(),
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value.into()));
            }
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keys and values in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &GgufValue)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The raw value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// The raw value of `key`, or [`FormatError::MissingKey`].
    pub fn require(&self, key: &str) -> Result<&GgufValue> {
        self.get(key)
            .ok_or_else(|| FormatError::MissingKey(key.to_string()))
    }

    /// `general.architecture` (`llama`, `qwen2`, ...).
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    /// `"{general.architecture}.{suffix}"`, e.g. `arch_key("block_count")` is `llama.block_count`.
    pub fn arch_key(&self, suffix: &str) -> Result<String> {
        Ok(format!("{}.{}", self.architecture()?, suffix))
    }

    int_getter!(get_u8, get_u8_opt, u8, "u8");
    int_getter!(get_i8, get_i8_opt, i8, "i8");
    int_getter!(get_u16, get_u16_opt, u16, "u16");
    int_getter!(get_i16, get_i16_opt, i16, "i16");
    int_getter!(get_u32, get_u32_opt, u32, "u32");
    int_getter!(get_i32, get_i32_opt, i32, "i32");
    int_getter!(get_u64, get_u64_opt, u64, "u64");
    int_getter!(get_i64, get_i64_opt, i64, "i64");

    /// The value of `key` as f32 (f32, or f64/integer converted); errors name the key.
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        Ok(self.get_f64(key)? as f32)
    }

    /// Like [`Self::get_f32`], but `Ok(None)` when the key is absent.
    pub fn get_f32_opt(&self, key: &str) -> Result<Option<f32>> {
        Ok(self.get_f64_opt(key)?.map(|x| x as f32))
    }

    /// The value of `key` as f64 (any float or integer); errors name the key.
    pub fn get_f64(&self, key: &str) -> Result<f64> {
        self.get_f64_opt(key)?
            .ok_or_else(|| FormatError::MissingKey(key.to_string()))
    }

    /// Like [`Self::get_f64`], but `Ok(None)` when the key is absent.
    pub fn get_f64_opt(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| wrong(key, "float", v)),
        }
    }

    /// The value of `key` as bool; errors name the key.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.get_bool_opt(key)?
            .ok_or_else(|| FormatError::MissingKey(key.to_string()))
    }

    /// Like [`Self::get_bool`], but `Ok(None)` when the key is absent.
    pub fn get_bool_opt(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(GgufValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(wrong(key, "bool", v)),
        }
    }

    /// The value of `key` as a string; errors name the key.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.get_str_opt(key)?
            .ok_or_else(|| FormatError::MissingKey(key.to_string()))
    }

    /// Like [`Self::get_str`], but `Ok(None)` when the key is absent.
    pub fn get_str_opt(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(GgufValue::String(s)) => Ok(Some(s)),
            Some(v) => Err(wrong(key, "string", v)),
        }
    }

    /// The value of `key` as an array of any element type; errors name the key.
    pub fn get_array(&self, key: &str) -> Result<&GgufArray> {
        match self.require(key)? {
            GgufValue::Array(a) => Ok(a),
            v => Err(wrong(key, "array", v)),
        }
    }

    /// Like [`Self::get_array`], but `Ok(None)` when the key is absent.
    pub fn get_array_opt(&self, key: &str) -> Result<Option<&GgufArray>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.get_array(key).map(Some),
        }
    }

    array_getter!(get_str_array, String, String, "array of string");
    array_getter!(get_f32_array, F32, f32, "array of f32");
    array_getter!(get_i32_array, I32, i32, "array of i32");
    array_getter!(get_u32_array, U32, u32, "array of u32");
    array_getter!(get_u8_array, U8, u8, "array of u8");

    /// An integer array of any integer element type, widened to i64; errors name the key.
    pub fn get_int_array(&self, key: &str) -> Result<Vec<i64>> {
        let a = self.get_array(key)?;
        a.to_ints()
            .and_then(|v| v.into_iter().map(|x| i64::try_from(x).ok()).collect())
            .ok_or_else(|| FormatError::WrongType {
                key: key.to_string(),
                expected: "array of integers",
                found: GgufValue::Array(a.clone()).type_description(),
            })
    }

    /// A u32 that may also be stored per layer as an integer array (as `head_count_kv` can be):
    /// a scalar is returned as is, an array gives its first element.
    pub fn get_u32_or_first(&self, key: &str) -> Result<u32> {
        let v = self.require(key)?;
        match v {
            GgufValue::Array(a) => a
                .int_at(0)
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| wrong(key, "u32 or array of u32", v)),
            _ => self.get_u32(key),
        }
    }
}
