//! Checking what C passes in: strings, output pointers and ids.

use std::ffi::{c_char, CStr};

use paio::{FileClass, RequestContext, RequestType};

use crate::status::Error;

/// The NUL-terminated C string at `ptr` as bytes, or an error naming `what`
/// if `ptr` is NULL.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that stays valid and
/// unchanged for `'a`.
pub(crate) unsafe fn c_bytes<'a>(ptr: *const c_char, what: &str) -> Result<&'a [u8], Error> {
    if ptr.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL, and the caller promises a NUL-terminated string valid
    // for 'a.
    Ok(unsafe { CStr::from_ptr(ptr) }.to_bytes())
}

/// The NUL-terminated C string at `ptr` as UTF-8 text, or an error naming
/// `what` if `ptr` is NULL or the text is not UTF-8.
///
/// # Safety
/// As for [`c_bytes`].
pub(crate) unsafe fn c_str<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Error> {
    // SAFETY: forwarded from this function's own contract.
    let bytes = unsafe { c_bytes(ptr, what) }?;
    std::str::from_utf8(bytes)
        .map_err(|e| Error::invalid(format!("{what} is not valid UTF-8: {e}")))
}

/// An output pointer that must not be NULL.
pub(crate) fn out_ptr<T>(ptr: *mut T, what: &str) -> Result<*mut T, Error> {
    if ptr.is_null() {
        Err(Error::invalid(format!("{what} is NULL")))
    } else {
        Ok(ptr)
    }
}

/// The request type with id `raw`: a built-in one or one interned with
/// `paio_request_type`. Lock-free (see `RequestType::from_raw`).
pub(crate) fn request_type(raw: u16) -> Result<RequestType, Error> {
    RequestType::from_raw(raw).ok_or_else(|| {
        Error::invalid(format!(
            "unknown request type id {raw} (neither built in nor returned by paio_request_type)"
        ))
    })
}

/// The request context with id `raw`: 0 (none) or one interned with
/// `paio_request_context`. Lock-free (see `RequestContext::from_raw`).
pub(crate) fn request_context(raw: u16) -> Result<RequestContext, Error> {
    RequestContext::from_raw(raw).ok_or_else(|| {
        Error::invalid(format!(
            "unknown request context id {raw} (not returned by paio_request_context)"
        ))
    })
}

/// The file class with id `raw`: 0 (none) or one interned with
/// `paio_file_class`. Lock-free (see `FileClass::from_raw`).
pub(crate) fn file_class(raw: u16) -> Result<FileClass, Error> {
    FileClass::from_raw(raw).ok_or_else(|| {
        Error::invalid(format!(
            "unknown file class id {raw} (not returned by paio_file_class)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::paio_status;

    #[test]
    fn null_and_non_utf8_strings_are_errors() {
        // SAFETY: NULL is allowed by c_str's contract.
        let e = unsafe { c_str(std::ptr::null(), "name") }.unwrap_err();
        assert_eq!(e.status, paio_status::PAIO_ERR_INVALID_ARGUMENT);
        assert_eq!(e.message, "name is NULL");
        let bad = c"ab\xffcd";
        // SAFETY: a C string literal is NUL-terminated and static.
        let e = unsafe { c_str(bad.as_ptr(), "name") }.unwrap_err();
        assert_eq!(e.status, paio_status::PAIO_ERR_INVALID_ARGUMENT);
        assert!(e.message.starts_with("name is not valid UTF-8"), "{e:?}");
        // SAFETY: as above.
        assert_eq!(unsafe { c_str(c"ok".as_ptr(), "name") }.unwrap(), "ok");
    }

    #[test]
    fn ids_are_validated() {
        assert_eq!(request_type(1).unwrap(), RequestType::READ);
        assert_eq!(request_type(1).unwrap(), RequestType::READ);
        assert!(request_type(500).is_err());
        assert!(request_type(u16::MAX).is_err());
        let custom = RequestType::named("ffi-args-test-op").unwrap();
        assert_eq!(request_type(custom.raw()).unwrap(), custom);

        assert_eq!(request_context(0).unwrap(), RequestContext::NONE);
        let flush = RequestContext::named("ffi-args-test-flush").unwrap();
        assert_eq!(request_context(flush.raw()).unwrap(), flush);
        assert_eq!(request_context(flush.raw()).unwrap(), flush);
        let e = request_context(u16::MAX).unwrap_err();
        assert_eq!(e.status, paio_status::PAIO_ERR_INVALID_ARGUMENT);

        assert_eq!(file_class(0).unwrap(), FileClass::NONE);
        let logs = FileClass::named("ffi-args-test-logs").unwrap();
        assert_eq!(file_class(logs.raw()).unwrap(), logs);
        assert!(file_class(u16::MAX).is_err());
    }
}
