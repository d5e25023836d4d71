//! Process-wide A/B switches read once from the environment.
//!
//! Kernel variants stay selectable on the GPU machine without a rebuild (`POCKET_X=0` runs the
//! previous path beside the new one in the same session). Each switch is one `static`, read on
//! first use and fixed for the life of the process.

use std::sync::OnceLock;

/// An on/off switch named by an environment variable.
pub(crate) struct EnvSwitch {
    name: &'static str,
    default_on: bool,
    value: OnceLock<bool>,
}

impl EnvSwitch {
    /// On unless the variable is `0`.
    pub(crate) const fn on_unless_zero(name: &'static str) -> Self {
        EnvSwitch {
            name,
            default_on: true,
            value: OnceLock::new(),
        }
    }

    /// Off unless the variable is `1`.
    pub(crate) const fn off_unless_one(name: &'static str) -> Self {
        EnvSwitch {
            name,
            default_on: false,
            value: OnceLock::new(),
        }
    }

    /// The switch's value (the environment is read on the first call only).
    pub(crate) fn on(&self) -> bool {
        *self.value.get_or_init(|| {
            let v = std::env::var(self.name).ok();
            parse(v.as_deref(), self.default_on)
        })
    }
}

/// A number named by an environment variable (a byte budget, a block count), read on first use.
pub(crate) struct EnvNumber {
    name: &'static str,
    default: usize,
    value: OnceLock<usize>,
}

impl EnvNumber {
    /// `default` unless the variable holds an unsigned integer.
    pub(crate) const fn new(name: &'static str, default: usize) -> Self {
        EnvNumber {
            name,
            default,
            value: OnceLock::new(),
        }
    }

    /// The number (the environment is read on the first call only).
    pub(crate) fn get(&self) -> usize {
        *self.value.get_or_init(|| {
            let v = std::env::var(self.name).ok();
            parse_number(v.as_deref(), self.default)
        })
    }
}

/// The value of a number whose variable holds `v`: unset or not an unsigned integer, the default.
fn parse_number(v: Option<&str>, default: usize) -> usize {
    v.and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// The value of a switch whose variable holds `v` (unset: the default).
fn parse(v: Option<&str>, default_on: bool) -> bool {
    match v {
        None => default_on,
        Some(v) if default_on => v != "0",
        Some(v) => v == "1",
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, parse_number};

    #[test]
    fn a_number_is_the_default_unless_the_variable_holds_one() {
        assert_eq!(parse_number(None, 16), 16);
        assert_eq!(parse_number(Some("4"), 16), 4);
        assert_eq!(parse_number(Some(" 0 "), 16), 0);
        assert_eq!(parse_number(Some("-1"), 16), 16);
        assert_eq!(parse_number(Some("lots"), 16), 16);
    }

    #[test]
    fn unset_gives_the_default_and_only_the_opposite_word_flips_it() {
        assert!(parse(None, true));
        assert!(!parse(None, false));
        assert!(!parse(Some("0"), true));
        assert!(parse(Some("1"), true));
        assert!(parse(Some("yes"), true));
        assert!(parse(Some("1"), false));
        assert!(!parse(Some("0"), false));
        assert!(!parse(Some("yes"), false));
    }
}
