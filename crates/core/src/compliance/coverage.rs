//! Coverage of frameworks' controls by the intents in force (filled in below).
