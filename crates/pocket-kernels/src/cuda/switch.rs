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
    use super::parse;

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
