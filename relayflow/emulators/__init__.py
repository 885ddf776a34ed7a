"""Local stand-ins the tests and the local stack run: our Cloud Tasks emulator (Google ships
none), the fake client API and the example app's fake order dependencies. Shipped inside
relayflow so `relayflow local up` works from an installed wheel; nothing in production imports
them."""
