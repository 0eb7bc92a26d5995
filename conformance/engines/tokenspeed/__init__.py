"""TokenSpeed: its C++ scheduler (``tokenspeed-scheduler``), driven as an engine."""
