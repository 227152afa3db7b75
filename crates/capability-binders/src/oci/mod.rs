//! `capability/oci-command`: an OCI image bound by its manifest digest.
