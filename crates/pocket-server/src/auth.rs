//! Bearer-token check for the `/v1` endpoints.

use hyper::header::AUTHORIZATION;
use hyper::HeaderMap;

use crate::errors::ApiError;

/// Compares without stopping at the first differing byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks `Authorization: Bearer <key>` when a key is configured.
pub fn check(expected: Option<&str>, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let Some(value) = headers.get(AUTHORIZATION) else {
        return Err(ApiError::unauthorized(
            "You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY'.",
        ));
    };
    let given = value
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    match given {
        Some(k) if same(k.as_bytes(), expected.as_bytes()) => Ok(()),
        _ => Err(ApiError::unauthorized("Incorrect API key provided.")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn keys() {
        let mut h = HeaderMap::new();
        assert!(check(None, &h).is_ok());
        assert_eq!(check(Some("k"), &h).unwrap_err().status, 401);
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer nope"));
        assert_eq!(check(Some("k"), &h).unwrap_err().status, 401);
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer k"));
        assert!(check(Some("k"), &h).is_ok());
    }
}
