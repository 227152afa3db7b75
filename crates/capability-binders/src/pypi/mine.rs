//! TODO: being written
