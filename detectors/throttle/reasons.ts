/** NVML clock-event (throttle) reason bits, as nvmlClocksEventReasons / DCGM report them. */
export const REASONS = {
  gpu_idle: 0x1,
  applications_clocks_setting: 0x2,
  sw_power_cap: 0x4,
  hw_slowdown: 0x8,
  sync_boost: 0x10,
  sw_thermal_slowdown: 0x20,
  hw_thermal_slowdown: 0x40,
  hw_power_brake_slowdown: 0x80,
  display_clock_setting: 0x100,
} as const;

/** Reasons that mean the hardware is protecting itself: a fault, not a setting or normal load. */
export const FAULT_REASONS =
  REASONS.hw_slowdown |
  REASONS.sw_thermal_slowdown |
  REASONS.hw_thermal_slowdown |
  REASONS.hw_power_brake_slowdown;

export function reasonNames(mask: number): string[] {
  return Object.entries(REASONS)
    .filter(([, bit]) => (mask & bit) !== 0)
    .map(([name]) => name);
}
