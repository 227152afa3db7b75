//! Document validators that reproduce the reference's issue messages, in order.
