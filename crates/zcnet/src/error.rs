//! The one shape every public error type of zcnet has (see the crate's "Errors" section): an
//! `raw_os_error()` and a `kind()` of `io::ErrorKind`, a `Display` that gives the context and a
//! `source()` that gives the cause (never both), and a conversion into `io::Error` that wraps the
//! error itself, so that `io::Error::get_ref`/`into_inner` and `downcast` give it back.

/// `From<$ty> for io::Error`, wrapping the error with its own `kind()`.
macro_rules! into_io_error {
    ($($ty:ty),* $(,)?) => {$(
        impl From<$ty> for std::io::Error {
            fn from(e: $ty) -> std::io::Error {
                std::io::Error::new(e.kind(), e)
            }
        }
    )*};
}

pub(crate) use into_io_error;

/// For an error of zcnet's own (no kernel call failed): `raw_os_error()` is `None` and `kind()` is
/// always `$kind`; and the conversion into `io::Error`.
macro_rules! own_error {
    ($ty:ty, $kind:ident) => {
        impl $ty {
            /// `None`: no kernel call failed.
            pub fn raw_os_error(&self) -> Option<i32> {
                None
            }

            #[doc = concat!("`io::ErrorKind::", stringify!($kind), "`, the kind of `io::Error` this converts to.")]
            pub fn kind(&self) -> std::io::ErrorKind {
                std::io::ErrorKind::$kind
            }
        }

        crate::error::into_io_error!($ty);
    };
}

pub(crate) use own_error;
