//! WHATWG URL checks used by the validators.
