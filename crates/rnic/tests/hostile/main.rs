//! softrnic against hostile and quirky peers: a scripted peer ([`peer`]) that speaks
//! raw MPA, DDP and RDMAP from the test provokes each fault a peer can cause, and the
//! tests assert the exact Terminate layer/type/code at both ends (what softrnic sent, as
//! the peer read it off the wire, and what softrnic reported), that nothing outside a
//! grant changed, and that other connections and the listener are unaffected.

mod claimed_close;
mod crc_large;
mod crc_read;
mod end_behind_data;
mod listener;
mod peer;
mod quirks;
mod reply_then_send;
mod resources;
mod stags;
mod terminate;
