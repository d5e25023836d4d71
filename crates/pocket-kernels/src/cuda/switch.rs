//! Process-wide A/B switches read once from the environment.
//!
//! Kernel variants stay selectable on the GPU machine without a rebuild (`POCKET_X=0` runs the
//! previous path beside the new one in the same session). Each switch is one `static`, read on
//! first use; an [`EnvChoice`] can also be overridden from code, so a test or bench compares
//! variants in one process.

use std::sync::atomic::{AtomicU8, Ordering};
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

/// One of a few values, named by an environment variable that `parse` reads (`None`: unset) on
/// first use, unless [`EnvChoice::set`] overrides it. `values` lists every value an override may
/// take.
pub(crate) struct EnvChoice<T: Copy + PartialEq + 'static> {
    name: &'static str,
    values: &'static [T],
    parse: fn(Option<&str>) -> T,
    from_env: OnceLock<T>,
    /// 0: no override; else 1 + the override's index in `values`.
    forced: AtomicU8,
}

impl<T: Copy + PartialEq + 'static> EnvChoice<T> {
    /// A choice read from `name` by `parse`; overrides among `values` (at most 255).
    pub(crate) const fn new(
        name: &'static str,
        values: &'static [T],
        parse: fn(Option<&str>) -> T,
    ) -> Self {
        EnvChoice {
            name,
            values,
            parse,
            from_env: OnceLock::new(),
            forced: AtomicU8::new(0),
        }
    }

    /// The override, else the environment's value (read on the first call only).
    pub(crate) fn get(&self) -> T {
        match self.forced.load(Ordering::Relaxed) {
            0 => *self.from_env.get_or_init(|| {
                let v = std::env::var(self.name).ok();
                (self.parse)(v.as_deref())
            }),
            i => self.values[usize::from(i) - 1],
        }
    }

    /// Overrides the environment (`Some`) for the whole process, or goes back to it (`None`). A
    /// value missing from `values` (a caller bug) goes back to the environment too.
    pub(crate) fn set(&self, v: Option<T>) {
        let code = v
            .and_then(|v| self.values.iter().position(|x| *x == v))
            .map_or(0, |i| i as u8 + 1);
        self.forced.store(code, Ordering::Relaxed);
    }
}

impl EnvChoice<bool> {
    /// An on/off choice read from `name` by `parse` (any spelling: `fused`, `exact`, `0`),
    /// overridable either way.
    pub(crate) const fn flag(name: &'static str, parse: fn(Option<&str>) -> bool) -> Self {
        Self::new(name, &[false, true], parse)
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
    use super::{parse, EnvChoice};

    #[test]
    fn a_choice_is_the_environments_until_overridden_and_back_after() {
        static C: EnvChoice<u8> = EnvChoice::new("POCKET_TEST_CHOICE_NEVER_SET", &[1, 2, 3], |v| {
            v.map_or(2, |_| 3)
        });
        assert_eq!(C.get(), 2);
        C.set(Some(1));
        assert_eq!(C.get(), 1);
        C.set(Some(9)); // not a listed value: back to the environment
        assert_eq!(C.get(), 2);
        C.set(Some(3));
        C.set(None);
        assert_eq!(C.get(), 2);
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
