//! The object server's wire format: a request is an object index and a count (big-endian u32 each);
//! each answer is the object's length (big-endian u64) and its bytes.

/// Reads one request: (object index, count), or `None` at the end of the connection.
pub(crate) fn decode_request(request: [u8; 8]) -> (usize, u32) {
    let index = u32::from_be_bytes(request[..4].try_into().expect("4 bytes"));
    let count = u32::from_be_bytes(request[4..].try_into().expect("4 bytes"));
    (index as usize, count)
}

pub(crate) fn request(index: usize, count: u32) -> [u8; 8] {
    let mut r = [0u8; 8];
    r[..4].copy_from_slice(&(index as u32).to_be_bytes());
    r[4..].copy_from_slice(&count.to_be_bytes());
    r
}
