//! Shares of a limited resource per client address (connections, body
//! memory): an address, IPv6 counted by its /64, may hold at most `max`
//! units at once, and a `Share` gives its units back when dropped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use replaysafe_core::config::address;

#[derive(Clone)]
pub struct AddressShares {
    max: usize,
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl AddressShares {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            held: Default::default(),
        }
    }

    /// `units` more for `client`, or None when that would pass its share.
    pub fn take(&self, client: IpAddr, units: usize) -> Option<Share> {
        let address = address::bucket(client);
        let mut held = self.held.lock().expect("never poisoned");
        let mine = held.get(&address).copied().unwrap_or(0);
        if mine + units > self.max {
            return None;
        }
        held.insert(address, mine + units);
        Some(Share {
            address,
            units,
            held: self.held.clone(),
        })
    }
}

pub struct Share {
    address: IpAddr,
    units: usize,
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self.held.lock().expect("never poisoned");
        if let Some(mine) = held.get_mut(&self.address) {
            *mine = mine.saturating_sub(self.units);
            if *mine == 0 {
                held.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_units_back_as_shares_drop() {
        let shares = AddressShares::new(2);
        let peer: IpAddr = "192.0.2.1".parse().unwrap();
        let first = shares.take(peer, 1).unwrap();
        let _second = shares.take(peer, 1).unwrap();
        assert!(shares.take(peer, 1).is_none());
        assert!(shares.take("192.0.2.2".parse().unwrap(), 2).is_some());
        drop(first);
        assert!(shares.take(peer, 1).is_some());
        assert!(
            shares.take(peer, 3).is_none(),
            "never more than the share at once"
        );
    }
}
