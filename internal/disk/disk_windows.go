//go:build windows

package disk

import "golang.org/x/sys/windows"

func of(dir string) (Space, error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return Space{}, err
	}
	var free, total, totalFree uint64
	if err := windows.GetDiskFreeSpaceEx(p, &free, &total, &totalFree); err != nil {
		return Space{}, err
	}
	return Space{Total: int64(total), Free: int64(free)}, nil
}
