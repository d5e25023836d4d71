//! Python-compatible helpers: `str()`/`repr()` formatting of values, transformers' `tojson`
//! (json.dumps spacing), and `strftime_now`.

use std::fmt::Write;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// Python's `repr()` of a string.
fn repr_str(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Writes a value as Python's `str()` would (`repr` inside containers).
pub(crate) fn py_str(v: &Value, out: &mut String, nested: bool) {
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::String if nested => repr_str(v.as_str().unwrap_or_default(), out),
        ValueKind::Map => {
            out.push('{');
            if let Ok(keys) = v.try_iter() {
                for (i, k) in keys.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_str(&k, out, true);
                    out.push_str(": ");
                    py_str(&v.get_item(&k).unwrap_or_default(), out, true);
                }
            }
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(items) = v.try_iter() {
                for (i, it) in items.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_str(&it, out, true);
                }
            }
            out.push(']');
        }
        ValueKind::Number => number(v, out),
        _ => {
            let _ = write!(out, "{v}");
        }
    }
}

/// Writes a number: integers as they are, floats as Python's `repr(float)`.
fn number(v: &Value, out: &mut String) {
    match f64::try_from(v.clone()) {
        Ok(f) if !v.is_integer() => py_float(f, out),
        _ => {
            let _ = write!(out, "{v}");
        }
    }
}

/// Python's `repr(float)`: shortest round-trip digits, fixed notation for exponents -4..16,
/// otherwise `d.ddde+XX`.
pub(crate) fn py_float(f: f64, out: &mut String) {
    if f.is_nan() {
        out.push_str("nan");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "inf" } else { "-inf" });
        return;
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let fixed = format!("{f}");
        out.push_str(&fixed);
        if !fixed.contains('.') {
            out.push_str(".0");
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "{mantissa}e{sign}{:02}", exp.abs());
    }
}

/// The `string` filter with Python's `str()` semantics.
pub(crate) fn string_filter(v: &Value) -> Value {
    if v.kind() == ValueKind::String {
        return v.clone();
    }
    let mut s = String::new();
    py_str(v, &mut s, false);
    Value::from(s)
}

/// jinja2's `wordcount`: the number of `\w+` runs.
pub(crate) fn wordcount(s: &str) -> usize {
    let mut n = 0;
    let mut in_word = false;
    for c in s.chars() {
        let w = c.is_alphanumeric() || c == '_';
        if w && !in_word {
            n += 1;
        }
        in_word = w;
    }
    n
}

/// Python `json.dumps` string escaping.
fn json_str(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && (c as u32) > 0x7e) => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

struct JsonStyle {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

fn json_value(v: &Value, st: &JsonStyle, depth: usize, out: &mut String) -> Result<(), Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(ind) = &st.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    };
    match v.kind() {
        ValueKind::None | ValueKind::Undefined => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => number(v, out),
        ValueKind::String => json_str(v.as_str().unwrap_or_default(), st.ensure_ascii, out),
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if st.sort_keys {
                keys.sort_by_key(|k| k.to_string());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&st.item_sep);
                }
                newline(out, depth + 1);
                match k.as_str() {
                    Some(s) => json_str(s, st.ensure_ascii, out),
                    None => json_str(&k.to_string(), st.ensure_ascii, out),
                }
                out.push_str(&st.key_sep);
                json_value(&v.get_item(k)?, st, depth + 1, out)?;
            }
            newline(out, depth);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&st.item_sep);
                }
                newline(out, depth + 1);
                json_value(it, st, depth + 1, out)?;
            }
            newline(out, depth);
            out.push(']');
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("Object of type {} is not JSON serializable", v.kind()),
            ))
        }
    }
    Ok(())
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)` with Python's default separators.
pub(crate) fn tojson(
    v: &Value,
    ensure_ascii: Option<bool>,
    kwargs: Kwargs,
) -> Result<String, Error> {
    let ensure_ascii = match kwargs.get::<Option<bool>>("ensure_ascii")? {
        Some(b) => b,
        None => ensure_ascii.unwrap_or(false),
    };
    let indent: Option<Value> = kwargs.get("indent")?;
    let indent = match indent {
        None => None,
        Some(i) if i.is_none() => None,
        Some(i) => match i.as_str() {
            Some(s) => Some(s.to_string()),
            None => Some(" ".repeat(i64::try_from(i.clone()).unwrap_or(0).max(0) as usize)),
        },
    };
    let separators: Option<Value> = kwargs.get("separators")?;
    let (item_sep, key_sep) = match separators {
        Some(s) if !s.is_none() => {
            let parts: Vec<Value> = s.try_iter()?.collect();
            if parts.len() != 2 {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "separators must be a pair",
                ));
            }
            (parts[0].to_string(), parts[1].to_string())
        }
        _ => (
            if indent.is_some() { "," } else { ", " }.to_string(),
            ": ".to_string(),
        ),
    };
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    let st = JsonStyle {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
    };
    let mut out = String::new();
    json_value(v, &st, 0, &mut out)?;
    Ok(out)
}

/// A broken-down civil date-time (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateTime {
    /// Year, e.g. 2026.
    pub year: i64,
    /// Month 1..=12.
    pub month: u32,
    /// Day 1..=31.
    pub day: u32,
    /// Hour 0..=23.
    pub hour: u32,
    /// Minute 0..=59.
    pub minute: u32,
    /// Second 0..=59.
    pub second: u32,
}

impl DateTime {
    /// The current time (UTC).
    pub fn now() -> Self {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Self::from_unix(secs)
    }

    /// Converts seconds since 1970-01-01 UTC.
    pub fn from_unix(secs: i64) -> Self {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        // civil-from-days (Howard Hinnant's algorithm)
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Self {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem / 60 % 60) as u32,
            second: (rem % 60) as u32,
        }
    }

    fn weekday(&self) -> u32 {
        // 0 = Monday; Sakamoto's method gives 0 = Sunday
        let t = [0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4];
        let y = if self.month < 3 {
            self.year - 1
        } else {
            self.year
        };
        let w = (y + y.div_euclid(4) - y.div_euclid(100)
            + y.div_euclid(400)
            + t[self.month as usize - 1]
            + self.day as i64)
            .rem_euclid(7) as u32;
        (w + 6) % 7
    }

    fn day_of_year(&self) -> u32 {
        let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let leap = (self.year % 4 == 0 && self.year % 100 != 0) || self.year % 400 == 0;
        cum[self.month as usize - 1] + self.day + u32::from(leap && self.month > 2)
    }

    /// Formats like Python's `datetime.strftime` (C locale) for the common directives.
    pub fn strftime(&self, fmt: &str) -> String {
        const MONTHS: [&str; 12] = [
            "January",
            "February",
            "March",
            "April",
            "May",
            "June",
            "July",
            "August",
            "September",
            "October",
            "November",
            "December",
        ];
        const DAYS: [&str; 7] = [
            "Monday",
            "Tuesday",
            "Wednesday",
            "Thursday",
            "Friday",
            "Saturday",
            "Sunday",
        ];
        let mut out = String::new();
        let mut chars = fmt.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let month = MONTHS[self.month as usize - 1];
            let day = DAYS[self.weekday() as usize];
            let _ = match chars.next() {
                Some('Y') => write!(out, "{}", self.year),
                Some('y') => write!(out, "{:02}", self.year.rem_euclid(100)),
                Some('m') => write!(out, "{:02}", self.month),
                Some('d') => write!(out, "{:02}", self.day),
                Some('e') => write!(out, "{:2}", self.day),
                Some('B') => write!(out, "{month}"),
                Some('b') | Some('h') => write!(out, "{}", &month[..3]),
                Some('A') => write!(out, "{day}"),
                Some('a') => write!(out, "{}", &day[..3]),
                Some('H') => write!(out, "{:02}", self.hour),
                Some('I') => write!(out, "{:02}", (self.hour + 11) % 12 + 1),
                Some('p') => write!(out, "{}", if self.hour < 12 { "AM" } else { "PM" }),
                Some('M') => write!(out, "{:02}", self.minute),
                Some('S') => write!(out, "{:02}", self.second),
                Some('j') => write!(out, "{:03}", self.day_of_year()),
                Some('w') => write!(out, "{}", (self.weekday() + 1) % 7),
                Some('F') => write!(out, "{}-{:02}-{:02}", self.year, self.month, self.day),
                Some('%') => write!(out, "%"),
                Some(o) => write!(out, "%{o}"),
                None => write!(out, "%"),
            };
        }
        out
    }
}
