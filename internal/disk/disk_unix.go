//go:build unix

package disk

import "golang.org/x/sys/unix"

func of(dir string) (Space, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Space{}, err
	}
	bs := int64(st.Bsize) // int32, int64 or uint32 by platform
	return Space{Total: int64(st.Blocks) * bs, Free: int64(st.Bavail) * bs}, nil
}
