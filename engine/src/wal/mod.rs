//! The write-ahead log.
