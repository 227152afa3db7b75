//! TODO: being written
#[derive(Debug)]
pub struct PypiBinder;
