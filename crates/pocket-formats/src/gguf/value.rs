//! GGUF metadata values: the thirteen value types, scalars, strings and (nested) typed arrays.

/// A GGUF metadata value type id (`gguf_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgufValueType {
    /// u8 (id 0).
    U8,
    /// i8 (id 1).
    I8,
    /// u16 (id 2).
    U16,
    /// i16 (id 3).
    I16,
    /// u32 (id 4).
    U32,
    /// i32 (id 5).
    I32,
    /// f32 (id 6).
    F32,
    /// bool stored as one byte (id 7).
    Bool,
    /// UTF-8 string with a u64 length (id 8).
    String,
    /// Typed array with a u64 count (id 9).
    Array,
    /// u64 (id 10).
    U64,
    /// i64 (id 11).
    I64,
    /// f64 (id 12).
    F64,
}

impl GgufValueType {
    /// The type for a file id, `None` when the id is not in the specification.
    pub fn from_id(id: u32) -> Option<Self> {
        use GgufValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The id written to files.
    pub fn id(self) -> u32 {
        use GgufValueType::*;
        match self {
            U8 => 0,
            I8 => 1,
            U16 => 2,
            I16 => 3,
            U32 => 4,
            I32 => 5,
            F32 => 6,
            Bool => 7,
            String => 8,
            Array => 9,
            U64 => 10,
            I64 => 11,
            F64 => 12,
        }
    }

    /// Size in bytes of one value of a fixed-size type; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<usize> {
        use GgufValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// The smallest number of bytes one value of this type can occupy in a file.
    pub fn min_size(self) -> usize {
        match self {
            GgufValueType::String => 8,
            GgufValueType::Array => 12,
            t => t.fixed_size().unwrap_or(1),
        }
    }

    /// Lower-case name used in error messages (`u32`, `string`, ...).
    pub fn name(self) -> &'static str {
        use GgufValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// A typed GGUF array; nested arrays hold one [`GgufArray`] per element, each with its own type.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufArray {
    /// Array of u8.
    U8(Vec<u8>),
    /// Array of i8.
    I8(Vec<i8>),
    /// Array of u16.
    U16(Vec<u16>),
    /// Array of i16.
    I16(Vec<i16>),
    /// Array of u32.
    U32(Vec<u32>),
    /// Array of i32.
    I32(Vec<i32>),
    /// Array of f32.
    F32(Vec<f32>),
    /// Array of bool.
    Bool(Vec<bool>),
    /// Array of strings.
    String(Vec<String>),
    /// Array of u64.
    U64(Vec<u64>),
    /// Array of i64.
    I64(Vec<i64>),
    /// Array of f64.
    F64(Vec<f64>),
    /// Array of arrays.
    Array(Vec<GgufArray>),
}

impl GgufArray {
    /// The element type.
    pub fn elem_type(&self) -> GgufValueType {
        use GgufArray as A;
        use GgufValueType as T;
        match self {
            A::U8(_) => T::U8,
            A::I8(_) => T::I8,
            A::U16(_) => T::U16,
            A::I16(_) => T::I16,
            A::U32(_) => T::U32,
            A::I32(_) => T::I32,
            A::F32(_) => T::F32,
            A::Bool(_) => T::Bool,
            A::String(_) => T::String,
            A::U64(_) => T::U64,
            A::I64(_) => T::I64,
            A::F64(_) => T::F64,
            A::Array(_) => T::Array,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        use GgufArray as A;
        match self {
            A::U8(v) => v.len(),
            A::I8(v) => v.len(),
            A::U16(v) => v.len(),
            A::I16(v) => v.len(),
            A::U32(v) => v.len(),
            A::I32(v) => v.len(),
            A::F32(v) => v.len(),
            A::Bool(v) => v.len(),
            A::String(v) => v.len(),
            A::U64(v) => v.len(),
            A::I64(v) => v.len(),
            A::F64(v) => v.len(),
            A::Array(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as an i128 when the array holds integers (or bools) and `i` is in range.
    pub fn int_at(&self, i: usize) -> Option<i128> {
        use GgufArray as A;
        match self {
            A::U8(v) => v.get(i).map(|&x| x as i128),
            A::I8(v) => v.get(i).map(|&x| x as i128),
            A::U16(v) => v.get(i).map(|&x| x as i128),
            A::I16(v) => v.get(i).map(|&x| x as i128),
            A::U32(v) => v.get(i).map(|&x| x as i128),
            A::I32(v) => v.get(i).map(|&x| x as i128),
            A::U64(v) => v.get(i).map(|&x| x as i128),
            A::I64(v) => v.get(i).map(|&x| x as i128),
            A::Bool(v) => v.get(i).map(|&x| x as i128),
            _ => None,
        }
    }

    /// Every element as i128 when the array holds integers, `None` otherwise.
    pub fn to_ints(&self) -> Option<Vec<i128>> {
        (0..self.len()).map(|i| self.int_at(i)).collect()
    }
}

/// One GGUF metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// u8.
    U8(u8),
    /// i8.
    I8(i8),
    /// u16.
    U16(u16),
    /// i16.
    I16(i16),
    /// u32.
    U32(u32),
    /// i32.
    I32(i32),
    /// f32.
    F32(f32),
    /// bool.
    Bool(bool),
    /// UTF-8 string.
    String(String),
    /// Typed array.
    Array(GgufArray),
    /// u64.
    U64(u64),
    /// i64.
    I64(i64),
    /// f64.
    F64(f64),
}

impl GgufValue {
    /// The value type.
    pub fn value_type(&self) -> GgufValueType {
        use GgufValue as V;
        use GgufValueType as T;
        match self {
            V::U8(_) => T::U8,
            V::I8(_) => T::I8,
            V::U16(_) => T::U16,
            V::I16(_) => T::I16,
            V::U32(_) => T::U32,
            V::I32(_) => T::I32,
            V::F32(_) => T::F32,
            V::Bool(_) => T::Bool,
            V::String(_) => T::String,
            V::Array(_) => T::Array,
            V::U64(_) => T::U64,
            V::I64(_) => T::I64,
            V::F64(_) => T::F64,
        }
    }

    /// A type description for error messages: `u32`, `string`, `array of f32`, ...
    pub fn type_description(&self) -> String {
        match self {
            GgufValue::Array(a) => format!("array of {}", array_type_description(a)),
            v => v.value_type().name().to_string(),
        }
    }

    /// The value as an integer when it is one (bools excluded).
    pub fn as_int(&self) -> Option<i128> {
        use GgufValue as V;
        Some(match *self {
            V::U8(x) => x as i128,
            V::I8(x) => x as i128,
            V::U16(x) => x as i128,
            V::I16(x) => x as i128,
            V::U32(x) => x as i128,
            V::I32(x) => x as i128,
            V::U64(x) => x as i128,
            V::I64(x) => x as i128,
            _ => return None,
        })
    }

    /// The value as f64 when it is a float or an integer.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(x) => Some(x as f64),
            GgufValue::F64(x) => Some(x),
            _ => self.as_int().map(|x| x as f64),
        }
    }

    /// The value as a string slice when it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an array when it is one.
    pub fn as_array(&self) -> Option<&GgufArray> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

fn array_type_description(a: &GgufArray) -> String {
    match a {
        GgufArray::Array(inner) => match inner.first() {
            Some(first) => format!("array of {}", array_type_description(first)),
            None => "array".to_string(),
        },
        other => other.elem_type().name().to_string(),
    }
}

macro_rules! value_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for GgufValue {
            fn from(x: $t) -> Self { GgufValue::$v(x) }
        }
        impl From<Vec<$t>> for GgufArray {
            fn from(x: Vec<$t>) -> Self { GgufArray::$v(x) }
        }
        impl From<Vec<$t>> for GgufValue {
            fn from(x: Vec<$t>) -> Self { GgufValue::Array(GgufArray::$v(x)) }
        }
    )*};
}
value_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => String, u64 => U64, i64 => I64, f64 => F64);

impl From<&str> for GgufValue {
    fn from(x: &str) -> Self {
        GgufValue::String(x.to_string())
    }
}

impl From<GgufArray> for GgufValue {
    fn from(x: GgufArray) -> Self {
        GgufValue::Array(x)
    }
}

impl From<Vec<&str>> for GgufValue {
    fn from(x: Vec<&str>) -> Self {
        GgufValue::Array(GgufArray::String(
            x.into_iter().map(str::to_string).collect(),
        ))
    }
}
